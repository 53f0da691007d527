#pragma once
#include <cstdint>
#include <string>

namespace strata {

// The process's resident memory as the kernel counts it (Linux /proc/self; -1
// where it is not available). Complements the tracking allocator: it also sees
// the runtime, libraries, and allocations made outside libtorch (Gloo's buffers).
int64_t rss_bytes();       // VmRSS
int64_t rss_peak_bytes();  // VmHWM: the high-water mark since the last reset
// Restarts the high-water mark at the current RSS (/proc/self/clear_refs).
void reset_rss_peak();
// A field of /proc/self/status in bytes (the kB figure times 1024), or -1.
int64_t proc_status_bytes(const std::string& key);

}  // namespace strata
