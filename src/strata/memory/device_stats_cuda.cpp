// Compiled only with STRATA_CUDA=ON.
#include <c10/cuda/CUDACachingAllocator.h>

#include "strata/memory/device_stats.h"

namespace strata {

std::optional<DeviceMemoryStats> cuda_memory_stats(int device) {
  using c10::CachingAllocator::StatType;
  const auto s =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  const auto agg = static_cast<size_t>(StatType::AGGREGATE);
  return DeviceMemoryStats{s.allocated_bytes[agg].current, s.allocated_bytes[agg].peak,
                           s.reserved_bytes[agg].current, s.reserved_bytes[agg].peak};
}

void reset_cuda_peaks(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

}  // namespace strata
