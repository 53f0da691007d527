#include "strata/plan/reference_fit.h"

#include <algorithm>

#include "strata/models/flavours.h"

namespace strata {

namespace {
// How many times the reference's share of collectives (over the rest of its step) the
// small run's must be for the two to tell the terms apart.
constexpr double kLeastCommShareRatio = 1.5;
}  // namespace

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
                       const ReferenceRun& small, double measured_small, const CostOptions& o) {
  const int64_t g = ref.ranks;
  // The small run's predicted step over its measured one, less 1, with collectives at
  // k and the step scale that fits the reference at that k.
  auto at = [&](double k) {
    HardwareProfile q = hw;
    q.tp_collective_scale[g] = k;
    const double s = step_scale_from(q, ref, o, measured_ref);
    q.tp_step_scale[g] = s;
    return std::pair{predict_reference(small, o, q).step_s / measured_small - 1, s};
  };
  // The small run must be the more collective-bound by a margin, or the two runs do
  // not tell collectives from compute (and the small run's step would not grow with k).
  auto comm_share = [&](const ReferenceRun& r) {
    HardwareProfile q = hw;
    q.tp_collective_scale.erase(g);
    const StepPrediction p = predict_reference(r, o, q);
    return p.tp_comm_s / std::max(p.step_s - p.tp_comm_s - p.dp_exposed_s, 1e-12);
  };
  if (!(comm_share(small) > kLeastCommShareRatio * comm_share(ref))) {
    HardwareProfile q = hw;
    q.tp_collective_scale.erase(g);
    return {step_scale_from(q, ref, o, measured_ref), 1.0};
  }
  double lo = kLeastTpCollectiveScale, hi = kMostTpCollectiveScale;
  const auto [miss_lo, s_lo] = at(lo);
  const auto [miss_hi, s_hi] = at(hi);
  if (miss_lo >= 0) return {s_lo, lo};
  if (miss_hi <= 0) return {s_hi, hi};
  for (int i = 0; i < 50; ++i) {
    const double mid = (lo + hi) / 2;
    (at(mid).first < 0 ? lo : hi) = mid;
  }
  const double k = (lo + hi) / 2;
  return {at(k).second, k};
}

}  // namespace strata
