# Note [installed headers]: `cmake --install` puts libstrata, the strata binary (the
# launcher) and a CMake package under the prefix. The headers installed are the public
# API header (src/strata/api/strata.h) and every Strata header it includes, directly
# or not, found here by following the #include "strata/..." lines: only what users
# need, and a header added to that set travels without a list to keep.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

function(strata_header_closure root out)
  set(todo "${root}")
  set(seen "")
  while(todo)
    list(POP_FRONT todo h)
    if(h IN_LIST seen OR NOT EXISTS "${PROJECT_SOURCE_DIR}/src/${h}")
      continue()
    endif()
    list(APPEND seen "${h}")
    file(STRINGS "${PROJECT_SOURCE_DIR}/src/${h}" lines REGEX "^#include \"strata/")
    foreach(line ${lines})
      string(REGEX REPLACE "^#include \"(strata/[^\"]+)\".*" "\\1" dep "${line}")
      list(APPEND todo "${dep}")
    endforeach()
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

strata_header_closure("strata/api/strata.h" STRATA_PUBLIC_HEADERS)
set_property(GLOBAL PROPERTY STRATA_PUBLIC_HEADERS "${STRATA_PUBLIC_HEADERS}")
foreach(h ${STRATA_PUBLIC_HEADERS})
  get_filename_component(dir "${h}" DIRECTORY)
  install(FILES "src/${h}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/${dir}")
endforeach()
install(FILES "${CMAKE_BINARY_DIR}/include/strata/version.h"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/strata")

install(TARGETS strata_lib EXPORT StrataTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS strata RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(STRATA_SHARED)  # the installed binary finds the installed libstrata.so
  set_property(TARGET strata APPEND PROPERTY INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()
install(EXPORT StrataTargets NAMESPACE Strata::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Strata)

set(STRATA_CONFIG_CUDA ${STRATA_CUDA})
set(STRATA_CONFIG_SHARED ${STRATA_SHARED})
configure_package_config_file(cmake/StrataConfig.cmake.in
  "${CMAKE_BINARY_DIR}/StrataConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Strata PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/StrataConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/StrataConfig.cmake"
  "${CMAKE_BINARY_DIR}/StrataConfigVersion.cmake" cmake/StrataTorch.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Strata)
