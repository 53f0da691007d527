#pragma once
#include <cstdint>
#include <map>

#include "strata/plan/cost_model.h"
#include "strata/plan/profile.h"

namespace strata {

// The calibration's reference runs (Note [step calibration]) and the fits that bring
// the cost model to them. Pure: calibrate measures, these functions fit, and the tests
// feed them steps the model itself predicted.

// The tensor-parallel reference's second run: one sequence per micro-batch, where the
// collectives wait least on compute between them (Note [tensor-parallel collectives
// in a run]).
inline constexpr int64_t kTpCollectiveMicroBatch = 1;
// The most tp_collective_scale a fit may return.
inline constexpr double kMostTpCollectiveScale = 2.0;

// The reference layout: the debug GPT over g ranks, dp = g / tp, `micro` sequences per
// micro-batch, `micro_batches` of them per step on each dp rank.
struct ReferenceRun {
  int64_t ranks = 1, tp = 1, micro = 4, micro_batches = 2;
  int64_t batch() const { return micro * micro_batches * (ranks / tp); }
  Layout layout() const;
  // The bytes of one block's tp all-reduce: micro x sequence x d_model floats.
  double tp_message_bytes() const;
};

// The step `hw` predicts for the reference (o: its part scales, if any; precision and
// batch are the reference's own).
StepPrediction predict_reference(const ReferenceRun& r, const CostOptions& o,
                                 const HardwareProfile& hw);

// The scale that brings the reference's predicted step to `measured` seconds: what
// remains of the measured step after the predicted communication, over the predicted
// rest without any step scale (floored at 0.5).
double step_scale_from(const HardwareProfile& hw, const ReferenceRun& r, const CostOptions& o,
                       double measured);

// Note [tensor-parallel collectives in a run] fitted: for each of the two tp runs (the
// small one at micro-batch 1, the reference at 4), what its tp collectives took (the
// run's own comm timers, seconds a step) over what the loaded fits predict for them,
// within [kLeastTpCollectiveScale, kMostTpCollectiveScale], at the size of its blocks'
// all-reduce (tp_message_bytes); the tp step scale then brings the reference to its
// measured step with the collectives so priced. A tp group as large as the world keeps
// its own fit (no points). Each factor is bisected, smaller messages first, so that
// with those before it the run's collectives are priced as its timers measured them.
struct TpScales {
  double step_scale = 1;
  std::map<double, double> collective_scale;  // bytes -> factor
};
TpScales fit_tp_scales(const HardwareProfile& hw, const ReferenceRun& ref, double measured_ref_step,
                       double measured_ref_tp_comm, const ReferenceRun& small,
                       double measured_small_tp_comm, const CostOptions& o);

}  // namespace strata
