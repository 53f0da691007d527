#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "strata/core/stats.h"
#include "strata/plan/profile.h"

namespace strata {

// The compute half of `strata calibrate`, on one rank: matrix-multiply and linear-layer
// curves, element-wise bandwidth, the step's kernels (Note [kernel calibration]), the
// op overhead and the contention mix (Note [contention]). quick: fewer sizes and repeats.

using CalibrateClock = std::chrono::steady_clock;

// Note [slow dtypes in calibration]: a sweep over growing sizes stops after the first
// size whose one call took longer than this; the profile's curves take the rate of
// their largest point beyond it (curve_seconds). On a CPU without bf16 instructions
// (AVX2 only) a bf16 multiply runs at 0.4-2 GFLOP/s against fp32's 50-130, and timing
// the bf16 curves to their full sizes took most of a 387 s calibration at 4 ranks, the
// one-rank part alone 241 s; the sizes past a quarter second add no rate a step of
// such a machine would run at. Such a call (the warm-up run says so) is also timed
// once, not min_reps times (Note [calibration time]).
inline constexpr double kSlowestTimedCall = 0.25;

// Median seconds of fn over at least `min_reps` runs and about `budget_s`, after one
// warm-up run; one run when the warm-up took longer than kSlowestTimedCall.
template <class Fn>
double median_seconds(Fn fn, int min_reps, double budget_s) {
  const auto warm0 = CalibrateClock::now();
  fn();
  if (std::chrono::duration<double>(CalibrateClock::now() - warm0).count() > kSlowestTimedCall)
    min_reps = 1;
  std::vector<double> t;
  const auto start = CalibrateClock::now();
  while (static_cast<int>(t.size()) < min_reps ||
         (std::chrono::duration<double>(CalibrateClock::now() - start).count() < budget_s &&
          t.size() < 50)) {
    const auto t0 = CalibrateClock::now();
    fn();
    t.push_back(std::chrono::duration<double>(CalibrateClock::now() - t0).count());
  }
  return median(t);
}

// Times `time_at(size)` (the seconds of one call at that size) for each of `sizes` in
// order, and stops after the first that took longer than `slowest_s`. Returns how many
// sizes were timed.
template <class Size, class TimeAt>
size_t sweep_until_slow(const std::vector<Size>& sizes, TimeAt time_at,
                        double slowest_s = kSlowestTimedCall) {
  size_t timed = 0;
  for (const Size& size : sizes) {
    ++timed;
    if (time_at(size) > slowest_s) break;
  }
  return timed;
}

// Note [calibrated worlds]: calibrate times collectives and runs the reference steps at
// 1, 2, 4, 8, .. ranks and at --nproc itself, not at every world up to it; the profile
// interpolates the worlds between (HardwareProfile::compute_slowdown, and the nearest
// measured group for collectives), and strata plan re-anchors any world inside the
// range on the machine at plan time (Note [the machine now]). On the AVX2 machine of
// 2026-12-07 the 3-rank world took 28 s of a 168 s calibration at --nproc 4 (its
// collectives 14 s, its three reference runs the rest); at --nproc 8 the skipped worlds
// would be half of them.
std::vector<int64_t> calibrated_worlds(int64_t nproc);

std::vector<GemmPoint> gemm_curve(at::ScalarType dtype, int64_t largest, bool quick);
double memory_bandwidth(bool quick);
std::map<std::string, std::vector<KernelPoint>> kernel_curves(bool quick);
// The AdamW curve's points: elements in all, in tensors of per_tensor elements (Note
// [AdamW past the caches]).
struct AdamWShape {
  int64_t elements;
  int64_t per_tensor;
};
constexpr int64_t kAdamWLargestTensor = int64_t{1} << 18;
std::vector<AdamWShape> adamw_calibration_shapes(bool quick);
// One small op's forward and backward.
double op_overhead(bool quick);
// Seconds of the contention mix (a linear layer, a loss over a vocabulary, GELU).
double compute_mix_seconds(bool quick);

}  // namespace strata
