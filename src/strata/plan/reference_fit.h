#pragma once
#include <cstdint>

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

// Note [tensor-parallel collectives in a run] fitted: the tp collective scale k is
// what the small run's tp collectives took (its own comm timers, seconds a step) over
// what the loaded fits predict for them, within [kLeastTpCollectiveScale,
// kMostTpCollectiveScale]; the tp step scale s then brings the reference (micro-batch
// 4) to its measured step with collectives at k. A tp group as large as the world
// keeps k = 1.
struct TpScales {
  double step_scale = 1, collective_scale = 1;
};
TpScales fit_tp_scales(const HardwareProfile& hw, const ReferenceRun& ref, double measured_ref,
                       const ReferenceRun& small, double measured_small_tp_comm,
                       const CostOptions& o);

}  // namespace strata
