// Compiled only with STRATA_CUDA=ON (see CMakeLists.txt: *_cuda.cpp).
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "strata/distributed/backend.h"

namespace strata {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int64_t rank, int64_t size,
                                                    std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank),
                                                     static_cast<int>(size), opts);
}

}  // namespace strata
