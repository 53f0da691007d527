#pragma once
#include <c10/util/StringUtil.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "strata/memory/category.h"

namespace strata {

// Note [memory timeline]: while recording, each mark(phase) samples the tracking
// allocator's current bytes per category, with the time since recording started.
// Marks sit at phase boundaries: each block's forward (begin, end) and backward
// (begin), the loss, the end of backward, the optimizer step, and the collectives
// of DDP and ZeRO. The trainer records the first logging.memory_timeline_steps
// steps into <run_dir>/memory_timeline.jsonl; `strata report` draws it.
struct TimelineSample {
  double t_ms = 0;
  std::string phase;
  CategoryBytes bytes{};
};

class MemoryTimeline {
 public:
  static MemoryTimeline& get();
  void start();  // clears and starts recording
  std::vector<TimelineSample> stop();
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  void mark(const std::string& phase);

 private:
  std::mutex mu_;
  std::atomic<bool> recording_{false};
  double t0_ms_ = 0;
  std::vector<TimelineSample> samples_;
};

// mark() only when recording (the phase string is built only then).
#define STRATA_TIMELINE_MARK(...)                                    \
  do {                                                               \
    if (::strata::MemoryTimeline::get().recording())                 \
      ::strata::MemoryTimeline::get().mark(::c10::str(__VA_ARGS__)); \
  } while (0)

}  // namespace strata
