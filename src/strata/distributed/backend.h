#pragma once
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace strata {

// A c10d backend for one group: Gloo for CPU tensors, NCCL for CUDA tensors.
c10::intrusive_ptr<c10d::Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                               int64_t rank, int64_t size, c10::DeviceType device,
                                               std::chrono::milliseconds timeout);

#ifdef STRATA_CUDA
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int64_t rank, int64_t size,
                                                    std::chrono::milliseconds timeout);
#endif

}  // namespace strata
