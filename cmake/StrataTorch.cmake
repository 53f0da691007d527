# Locates libtorch and defines the imported target strata::torch.
#
# Note [CPU-only linking]
# find_package(Torch) probes for CUDA whenever nvcc is on the PATH and then links
# libtorch_cuda. A CPU build must never need CUDA libraries to build, so for
# STRATA_CUDA=OFF we locate the install prefix ourselves (the same prefix a user
# passes with CMAKE_PREFIX_PATH: the pip wheel's torch.utils.cmake_prefix_path,
# or an unpacked libtorch zip) and link only torch_cpu and c10. A CUDA build uses
# torch's own config, which brings torch_cuda, c10_cuda and the CUDA toolkit.

find_file(STRATA_TORCH_CONFIG TorchConfig.cmake
  PATHS ${CMAKE_PREFIX_PATH}
  PATH_SUFFIXES Torch share/cmake/Torch cmake/Torch
  NO_DEFAULT_PATH)
if(NOT STRATA_TORCH_CONFIG)
  message(FATAL_ERROR
    "libtorch not found: pass -DCMAKE_PREFIX_PATH=<torch cmake prefix> "
    "(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'), "
    "or run scripts/setup.sh which installs the torch wheel and does this for you")
endif()
get_filename_component(_cfg_dir "${STRATA_TORCH_CONFIG}" DIRECTORY)
get_filename_component(STRATA_TORCH_ROOT "${_cfg_dir}/../../.." ABSOLUTE)
message(STATUS "libtorch: ${STRATA_TORCH_ROOT}")

add_library(strata_torch INTERFACE)
add_library(strata::torch ALIAS strata_torch)
target_include_directories(strata_torch SYSTEM INTERFACE
  ${STRATA_TORCH_ROOT}/include
  ${STRATA_TORCH_ROOT}/include/torch/csrc/api/include)
target_compile_definitions(strata_torch INTERFACE USE_DISTRIBUTED USE_C10D_GLOO)

if(STRATA_CUDA)
  find_package(Torch REQUIRED)
  target_link_libraries(strata_torch INTERFACE ${TORCH_LIBRARIES})
  # The wheel's libtorch_cuda needs the NCCL/cuBLAS that pip installed beside it
  # (site-packages/nvidia/*/lib), not the older ones of the system CUDA toolkit.
  file(GLOB _strata_nv_dirs LIST_DIRECTORIES true "${STRATA_TORCH_ROOT}/../nvidia/*/lib")
  foreach(_d ${_strata_nv_dirs})
    target_link_options(strata_torch INTERFACE "-Wl,-rpath-link,${_d}")
    list(APPEND STRATA_NV_RPATH "${_d}")
  endforeach()
  target_compile_definitions(strata_torch INTERFACE STRATA_CUDA USE_C10D_NCCL USE_CUDA)
else()
  find_library(STRATA_TORCH_CPU_LIB torch_cpu PATHS ${STRATA_TORCH_ROOT}/lib NO_DEFAULT_PATH REQUIRED)
  find_library(STRATA_C10_LIB c10 PATHS ${STRATA_TORCH_ROOT}/lib NO_DEFAULT_PATH REQUIRED)
  target_link_libraries(strata_torch INTERFACE ${STRATA_TORCH_CPU_LIB} ${STRATA_C10_LIB})
endif()
# Binaries find libtorch where it was at build time.
set(CMAKE_BUILD_RPATH "${STRATA_TORCH_ROOT}/lib" ${STRATA_NV_RPATH})
set(CMAKE_INSTALL_RPATH "${STRATA_TORCH_ROOT}/lib" ${STRATA_NV_RPATH})
