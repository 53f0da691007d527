#pragma once
#include <cstdint>
#include <optional>

namespace strata {

// The CUDA caching allocator's own counters for the current device. The tracking
// allocator sees only host memory; on a GPU run these give the device picture.
struct DeviceMemoryStats {
  int64_t allocated = 0, peak_allocated = 0, reserved = 0, peak_reserved = 0;
};

#ifdef STRATA_CUDA
std::optional<DeviceMemoryStats> cuda_memory_stats(int device);
void reset_cuda_peaks(int device);
#else
inline std::optional<DeviceMemoryStats> cuda_memory_stats(int) {
  return std::nullopt;
}
inline void reset_cuda_peaks(int) {}
#endif

}  // namespace strata
