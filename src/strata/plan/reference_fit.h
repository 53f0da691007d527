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

// The most zero_collective_scale a fit may return.
inline constexpr double kMostZeroCollectiveScale = 2.0;
// The ZeRO reference's stage: it reduces every micro-batch and gathers every step
// (Note [ZeRO collectives in a loaded world]).
inline constexpr int64_t kZeroReferenceStage = 2;

// The reference layout: the debug GPT over g ranks, dp = g / (tp x pp), `micro`
// sequences per micro-batch, `micro_batches` of them per step on each dp rank, ZeRO
// stage `zero`, a 1F1B pipeline of `pp` stages.
struct ReferenceRun {
  int64_t ranks = 1, tp = 1, micro = 4, micro_batches = 2, zero = 0, pp = 1;
  int64_t dp() const { return ranks / (tp * pp); }
  int64_t batch() const { return micro * micro_batches * dp(); }
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

// Note [a pipeline's tp pair in a run]: the run that times a pipeline's pairs: the debug
// GPT at pp=2 x tp=2 (dp the rest) over `world` ranks, micro-batch 1, four a step;
// ranks 0 (none) where the world does not hold one (not a multiple of 4).
ReferenceRun pipeline_tp_reference(int64_t world);
// The most pipeline_tp_latency_scale a fit may return.
inline constexpr double kMostPipelineTpLatencyScale = 3.0;
// The factor on the loaded all-reduce fit's latency that prices the reference's first
// stage's tp collectives as `measured_first_stage_tp_comm` (rank 0's timers, seconds a
// step), bisected within [kLeastTpCollectiveScale, kMostPipelineTpLatencyScale].
double fit_pipeline_tp_latency_scale(const HardwareProfile& hw, const ReferenceRun& ref,
                                     double measured_first_stage_tp_comm, const CostOptions& o);

// Note [ZeRO collectives in a loaded world] fitted: the zero_collective_scale for the
// reference's world that brings its predicted step to `measured` seconds, `hw`
// carrying the step scale already fitted, bisected within [kLeastZeroCollectiveScale,
// kMostZeroCollectiveScale] (a bound where none inside explains the run). 1 for a
// reference without ZeRO or whose dp group is not the whole world.
double fit_zero_collective_scale(const HardwareProfile& hw, const ReferenceRun& zero_ref,
                                 double measured, const CostOptions& o);

// Note [the machine now]: the reference's fastest measured step now over the step the
// profile predicts for it, within [kLeastSpeed, kMostSpeed] (a run that far off is
// broken, not slow); 1 when nothing was measured.
inline constexpr double kLeastSpeed = 0.5, kMostSpeed = 2.0;
double speed_now(double measured, double predicted);

// Note [the machine now, shrunk]: the share (in log space) of one reading of the machine
// now that the runs after it keep: the factor the plan applies is reading^kSpeedKept.
inline constexpr double kSpeedKept = 0.5;
double speed_to_apply(double reading);

// Note [the machine's collectives now]: the run plan times for the world's collectives
// now: the debug GPT with tp over the whole world at micro-batch 1, four a step, whose
// steps are mostly its blocks' all-reduces; ranks 0 (none) for one rank or a world that
// does not divide the debug GPT's heads.
ReferenceRun world_collective_reference(int64_t world);
// The least a reading may scale the world's latency by (Note [the world's latency now]).
inline constexpr double kLeastLatencyFactor = 0.1;
// hw with the latency of its fits of the collectives over exactly `world` ranks
// (all-reduce, all-gather, reduce-scatter: what a group as large as the world issues;
// not send/recv, a pair's) scaled so that world_collective_reference(world)'s priced tp
// collectives take `factor` x their time; their bandwidth kept (Note [the world's
// latency now]). A world with no such reference (one that does not divide the debug
// GPT's heads) has its latency scaled by `factor` itself; one without fits of its own,
// or whose reference prices no latency, is left as it is.
HardwareProfile with_world_collectives_scaled(HardwareProfile hw, int64_t world, double factor);

}  // namespace strata
