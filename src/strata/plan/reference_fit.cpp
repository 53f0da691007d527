#include "strata/plan/reference_fit.h"

#include <algorithm>

#include "strata/models/flavours.h"

namespace strata {

Layout ReferenceRun::layout() const {
  Layout l;
  l.dp = ranks / tp, l.tp = tp, l.micro_batch = micro;
  return l;
}

StepPrediction predict_reference(const ReferenceRun& r, const CostOptions& o,
                                 const HardwareProfile& hw) {
  ModelConfig mc;
  mc.flavour = "debug";
  CostOptions ro = o;
  ro.precision = "fp32", ro.batch = r.batch(), ro.overlap = 0.0;
  return predict_step(resolve_model_spec(mc, DataShape{}), r.layout(), ro, hw);
}

double step_scale_from(const HardwareProfile& hw, const ReferenceRun& r, const CostOptions& o,
                       double measured) {
  HardwareProfile unscaled = hw;
  unscaled.step_scale.clear();
  unscaled.tp_step_scale.clear();
  const StepPrediction predicted = predict_reference(r, o, unscaled);
  // The scale stretches compute and the optimizer only (the collectives are measured
  // as a step issues them), so it is fitted to what remains of the measured step.
  const double comm = predicted.dp_exposed_s + predicted.tp_comm_s;
  // Below 1 too: the prediction it divides carries the measured contention, and where
  // that came out high the reference run's own step corrects it (floored at half, which
  // no sane run reaches, so a broken measurement cannot zero the compute).
  return std::max(0.5, (measured - comm) / std::max(predicted.step_s - comm, 1e-9));
}

TpScales fit_tp_scales(const HardwareProfile& hw, const ReferenceRun& ref, double measured_ref,
                       const ReferenceRun& small, double measured_small_tp_comm,
                       const CostOptions& o) {
  const int64_t g = ref.ranks;
  HardwareProfile q = hw;
  q.tp_collective_scale.erase(g);
  const double predicted = predict_reference(small, o, q).tp_comm_s;
  // A tp group as large as the world keeps its own fit (the scale never applies).
  if (small.tp < small.ranks && predicted > 0)
    q.tp_collective_scale[g] = std::clamp(measured_small_tp_comm / predicted,
                                          kLeastTpCollectiveScale, kMostTpCollectiveScale);
  return {step_scale_from(q, ref, o, measured_ref), q.tp_collective_scale_for(g)};
}

}  // namespace strata
