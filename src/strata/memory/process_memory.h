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
// Note [host memory reuse]: glibc serves blocks above its mmap threshold (at most 32
// MiB) with fresh mmaps and unmaps them on free, so a training step's large tensors
// (logits, attention scores, the embedding's gradient) arrive as new pages that the
// kernel zeroes on first touch, every step: 6-12% of a gpt2-124m step on 2 CPU cores
// went to clear_page. Raising the mmap and trim thresholds keeps freed blocks in the
// heap for the next step, as jemalloc/tcmalloc or the CUDA caching allocator would;
// the price is that RSS stays at its high-water mark between steps. Called once by
// the trainer for CPU training (memory.reuse_host_memory).
void keep_freed_host_memory();
// A field of /proc/self/status in bytes (the kB figure times 1024), or -1.
int64_t proc_status_bytes(const std::string& key);

}  // namespace strata
