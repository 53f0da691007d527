#include "strata/plan/reference_fit.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "strata/models/flavours.h"

namespace strata {

namespace {
// The x in [lo, hi] where the increasing f(x) reaches `target`, by bisection; the
// bound where none inside does.
template <class F>
double solve_within(double lo, double hi, double target, F&& f) {
  if (f(lo) >= target) return lo;
  if (f(hi) <= target) return hi;
  for (int i = 0; i < 50; ++i) {
    const double mid = (lo + hi) / 2;
    (f(mid) < target ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

ModelSpec reference_spec() {
  ModelConfig mc;
  mc.flavour = "debug";
  return resolve_model_spec(mc, DataShape{});
}
}  // namespace

double ReferenceRun::tp_message_bytes() const {
  const ModelSpec s = reference_spec();
  return static_cast<double>(micro * s.seq_len * s.d_model) * 4;
}

Layout ReferenceRun::layout() const {
  Layout l;
  l.dp = dp(), l.tp = tp, l.pp = pp, l.micro_batch = micro, l.zero = zero;
  return l;
}

namespace {
// The options a reference is priced with: o's part scales, its own precision and batch.
CostOptions reference_options(const ReferenceRun& r, const CostOptions& o) {
  CostOptions ro = o;
  ro.precision = "fp32", ro.batch = r.batch(), ro.overlap = 0.0;
  return ro;
}
}  // namespace

StepPrediction predict_reference(const ReferenceRun& r, const CostOptions& o,
                                 const HardwareProfile& hw) {
  return predict_step(reference_spec(), r.layout(), reference_options(r, o), hw);
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

TpScales fit_tp_scales(const HardwareProfile& hw, const ReferenceRun& ref, double measured_ref_step,
                       double measured_ref_tp_comm, const ReferenceRun& small,
                       double measured_small_tp_comm, const CostOptions& o) {
  const int64_t g = ref.ranks;
  HardwareProfile q = hw;
  q.tp_collective_scale.erase(g);
  // A tp group as large as the world keeps its own fit (the scale never applies).
  if (ref.tp >= ref.ranks || small.tp >= small.ranks)
    return {step_scale_from(q, ref, o, measured_ref_step), {}};
  // Smaller messages first: each run's factor is the one that, with those before it,
  // prices its collectives as its timers measured them (its few smaller messages, the
  // loss's reductions, take the factors below), bisected within the bounds.
  std::map<double, double>& points = q.tp_collective_scale[g];
  std::vector<std::pair<ReferenceRun, double>> runs{{small, measured_small_tp_comm},
                                                    {ref, measured_ref_tp_comm}};
  std::sort(runs.begin(), runs.end(), [](const auto& x, const auto& y) {
    return x.first.tp_message_bytes() < y.first.tp_message_bytes();
  });
  for (const auto& [run, measured] : runs) {
    const double bytes = run.tp_message_bytes();
    auto comm_at = [&](double x) {
      points[bytes] = x;
      return predict_reference(run, o, q).tp_comm_s;
    };
    points[bytes] =
        solve_within(kLeastTpCollectiveScale, kMostTpCollectiveScale, measured, comm_at);
  }
  return {step_scale_from(q, ref, o, measured_ref_step), points};
}

ReferenceRun pipeline_tp_reference(int64_t world) {
  if (world < 4 || world % 4 != 0) return ReferenceRun{0};
  return ReferenceRun{world, 2, kTpCollectiveMicroBatch, 4, 0, 2};
}

double fit_pipeline_tp_latency_scale(const HardwareProfile& hw, const ReferenceRun& ref,
                                     double measured_first_stage_tp_comm, const CostOptions& o) {
  HardwareProfile q = hw;
  double& x = q.pipeline_tp_latency_scale[ref.ranks];
  const CostOptions ro = reference_options(ref, o);
  auto comm_at = [&](double f) {
    x = f;
    return stage_tp_comm_seconds(reference_spec(), ref.layout(), ro, q, 0);
  };
  return solve_within(kLeastTpCollectiveScale, kMostPipelineTpLatencyScale,
                      measured_first_stage_tp_comm, comm_at);
}

double fit_zero_collective_scale(const HardwareProfile& hw, const ReferenceRun& zero_ref,
                                 double measured, const CostOptions& o) {
  // Where the cost model does not take the factor, the step does not move with it and a
  // bisection would return a bound the run never showed.
  if (!takes_zero_collective_scale(zero_ref.layout())) return 1.0;
  HardwareProfile q = hw;
  double& x = q.zero_collective_scale[zero_ref.ranks];
  auto step_at = [&](double f) {
    x = f;
    return predict_reference(zero_ref, o, q).step_s;
  };
  return solve_within(kLeastZeroCollectiveScale, kMostZeroCollectiveScale, measured, step_at);
}

double speed_now(double measured, double predicted) {
  if (measured <= 0 || predicted <= 0) return 1.0;
  return std::clamp(measured / predicted, kLeastSpeed, kMostSpeed);
}

// Note [the machine now, shrunk]: one reading of the machine is its lasting speed plus a
// passing moment, and only the first carries over to the layouts run after it. Over the
// 18 bench rows of chains c26-c33 (2 passes each) the constant factor that best fitted a
// row's measured steps moved 0.62 as far from the mean as the plan's reading did (log
// space; correlation 0.65), and the drift anchor's median over the row 0.35 as far. The
// reading's square root sat in the flat optimum: rows with a median |error| within 10%
// went from 8 of 15 (the reading as it stood; 11 without any) to 14 of 15 among the rows
// whose cost model has not changed since, the mean median from 9.9% to 8.4%. It is a
// property of this machine's noise, fitted once, so it is a named constant; the reading
// itself is printed whole. Out of sample, the ten rows of chains c34-c35 (a slower,
// noisier machine) gave a mean median |error| of 13.0% with it, 14.0% with no factor
// and 16.5% with the whole reading; mean maxima 29.4%, 29.8% and 37.4%.
double speed_to_apply(double reading) {
  if (reading <= 0) return 1.0;
  return std::pow(std::clamp(reading, kLeastSpeed, kMostSpeed), kSpeedKept);
}

ReferenceRun world_collective_reference(int64_t world) {
  if (world < 2 || reference_spec().n_head % world != 0) return ReferenceRun{0};
  return ReferenceRun{world, world, kTpCollectiveMicroBatch, 4};
}

// Note [the world's latency now]: the run that reads the world's collectives now
// (world_collective_reference) all-reduces 48 KiB at a time, where the fits price
// latency alone: 97% of its collectives' price on c36's 2-rank all-reduce fit (1.68 ms
// and 1.02 GB/s). So the reading says how long the world's collectives take to start,
// not how fast they move bytes, and it scales the fits' latency only: as much as makes
// the reference's priced collectives move by the factor. Scaled as a whole, the fits
// carried a latency reading onto the bandwidth of the d384 GPT's 1.5 MB all-reduces at
// micro-batch 8: on c35's hours-old profile (chain c36s) the reading of 0.59 priced its
// 2-rank row's tp layouts under, the row's median |error| 9.7% where the speed's factor
// alone gave 6.4%, while the debug GPT's row went from 14.1% to 4.8%.
HardwareProfile with_world_collectives_scaled(HardwareProfile hw, int64_t world, double factor) {
  if (factor == 1) return hw;  // no reading, or one equal to the speed's
  const ReferenceRun ref = world_collective_reference(world);
  auto scaled = [&](double latency_factor) {
    HardwareProfile q = hw;
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      auto by_op = q.collectives.find(op);
      if (by_op == q.collectives.end()) continue;
      auto fit = by_op->second.find(world);
      if (fit != by_op->second.end()) fit->second.latency_s *= latency_factor;
    }
    return q;
  };
  if (ref.ranks == 0) return scaled(factor);
  const CostOptions o;
  const double priced = predict_reference(ref, o, hw).tp_comm_s;
  const double latency = priced - predict_reference(ref, o, scaled(0)).tp_comm_s;
  if (priced <= 0 || latency <= 0) return hw;
  // The latency's share moves by what moves the whole by `factor`; never to nothing.
  return scaled(std::max(1 + (factor - 1) * priced / latency, kLeastLatencyFactor));
}

}  // namespace strata
