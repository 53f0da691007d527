#include "strata/memory/process_memory.h"

#include <malloc.h>

#include <fstream>

namespace strata {

int64_t proc_status_bytes(const std::string& key) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  return -1;
}

int64_t rss_bytes() {
  return proc_status_bytes("VmRSS");
}

int64_t rss_peak_bytes() {
  return proc_status_bytes("VmHWM");
}

void keep_freed_host_memory() {
  // 1 GiB: larger blocks (whole flat ZeRO buffers of big models) still map directly.
  constexpr int kThreshold = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kThreshold);
  mallopt(M_TRIM_THRESHOLD, kThreshold);
}

void reset_rss_peak() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

}  // namespace strata
