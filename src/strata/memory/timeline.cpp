#include "strata/memory/timeline.h"

#include <chrono>

#include "strata/memory/tracking_allocator.h"

namespace strata {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

MemoryTimeline& MemoryTimeline::get() {
  static MemoryTimeline t;
  return t;
}

void MemoryTimeline::start() {
  std::lock_guard<std::mutex> lock(mu_);
  samples_.clear();
  t0_ms_ = now_ms();
  recording_ = true;
}

std::vector<TimelineSample> MemoryTimeline::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = false;
  return std::move(samples_);
}

void MemoryTimeline::mark(const std::string& phase) {
  const MemoryStats s = memory_stats();
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_) return;
  samples_.push_back({now_ms() - t0_ms_, phase, s.current});
}

}  // namespace strata
