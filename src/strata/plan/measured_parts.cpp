#include "strata/plan/measured_parts.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <tuple>

#include "strata/core/errors.h"
#include "strata/core/stats.h"
#include "strata/memory/process_memory.h"
#include "strata/parallel/pipeline/profile.h"

namespace strata {

// Note [measured parts]: the kernels' sum misprices some models against others, and
// the reference run's step scale (Note [step calibration]), fitted on the debug GPT,
// carries the debug GPT's error to every model. Timed alone one rank at a time (one
// thread), the debug GPT's block at micro-batch 4 ran 1.32x its kernels' sum (its
// attention's 24-wide heads run well below the calibrated 32-wide ones' rate) while
// the d384 GPT's ran 1.04x; at micro-batch 1 the d384 block ran 1.23x (its 7 MB of
// weights are re-read every micro-batch, which the linear curve, timed with one
// weight kept in cache, leaves out) and at 8 0.99x. So the d384 GPT inherited a 1.25x
// scale where it needed about 1.0 (1-rank runs measured 8.8% over at micro-batch 4 and
// 6.6% under at 1). On a calibrated CPU profile `strata plan` therefore times the
// model's own parts (the pipeline's stage profile: a block, the embedding, the head
// and loss, forward and backward) at each micro-batch it plans, and the reference
// model's at its micro-batch, and scales each predicted part by its measured over
// predicted ratio divided by the reference's whole-model ratio: the reference itself
// is then priced as before (the step scale still fits it), and another model or
// micro-batch by how far it differs from the reference. Both are timed at the same
// moment, so the machine's speed at planning cancels out of the ratio.
namespace {
// The parts of every micro-batch planned and of the reference are timed in one
// round-robin (so that the machine's speed, which moves by a tenth within seconds here,
// moves them all alike) for about this long, at least 5 rounds, the first of which
// sizes the run (Note [rounds sized by their first]; each part's untimed run before its
// timed one, Note [a part timed warm], takes as long again). Timed one micro-batch
// after another for a second each, the debug GPT's block at micro-batch 8 came out
// 1.04x, 0.83x and 0.86x of the reference in three plans a minute apart.
constexpr double kTimedSeconds = 3.0;
// No fewer rounds than this: a round here is a second or more, so the budget above
// mostly meets this bound first. Nine, since the larger parts no longer run twice a
// round (Note [warm-up runs where they count]), take a tenth more time than five did
// (BERT-debug at 5 micro-batches: 9.5-10.8 s a plan against 7.9-9.3); six plans in a
// row timed its block and head factors with a spread (standard deviation over mean,
// averaged over the micro-batches) of 4.3% and 3.7% where five rounds had 6.8% and
// 4.8%, and 4.2% and 3.3% with the reference timed twice a round as well.
constexpr int kLeastRounds = 9;
// Only micro-batches whose round (three blocks, the embedding and the head, forward and
// backward) the kernels price under this are timed: planning a large model on a CPU
// profile must not build a block at a micro-batch of hundreds of sequences. Larger
// ones take the factors of the largest timed (a rate that has stopped growing).
constexpr double kMaxRoundSeconds = 1.0;

// Restores the intra-op threads however the timing ends.
struct ThreadsFor {
  explicit ThreadsFor(int64_t n) : saved(at::get_num_threads()) {
    at::set_num_threads(static_cast<int>(std::max<int64_t>(1, n)));
  }
  ~ThreadsFor() { at::set_num_threads(saved); }
  ThreadsFor(const ThreadsFor&) = delete;
  ThreadsFor& operator=(const ThreadsFor&) = delete;
  int saved;
};

// One micro-batch's parts, forward and backward together: a block, the embedding, the
// head and loss; predicted (PartCosts) or timed (StageCosts).
struct PartTimes {
  double block = 0, first = 0, last = 0;
};
PartTimes times_of(const PartCosts& p) {
  return {p.block_forward + p.block_backward, p.first_forward + p.first_backward,
          p.last_forward + p.last_backward};
}
PartTimes times_of(const StageCosts& m) {
  return {m.block.at(0), m.first, m.last};
}

// The kernels' price of spec's parts at a micro-batch, without factors.
PartTimes predicted_at(const ModelSpec& spec, int64_t micro_batch, const CostOptions& o,
                       const HardwareProfile& hw) {
  Layout l;
  l.micro_batch = micro_batch;
  CostOptions plain = o;
  plain.part_scale.clear();
  return times_of(predict_parts(spec, l, plain, hw));
}

// The whole model's forward and backward.
double whole(const ModelSpec& spec, const PartTimes& t) {
  return static_cast<double>(spec.n_layer) * t.block + t.first + t.last;
}
// One round of the timing: three parts each holding a block, then the two ends.
double round_of(const PartTimes& t) {
  return 3 * t.block + t.first + t.last;
}

PartScale scale_of(const PartTimes& m, const PartTimes& p, double reference_ratio) {
  // A part's factor is bounded: the embedding's difference of two timings is tiny and
  // noisy, and no sane measurement is a quarter or four times the kernels' sum.
  auto ratio = [&](double measured, double predicted) {
    if (predicted <= 0 || measured <= 0) return 1.0;
    return std::clamp(measured / predicted / reference_ratio, 0.25, 4.0);
  };
  return {ratio(m.block, p.block), ratio(m.first, p.first), ratio(m.last, p.last)};
}
// What decides a transformer's parts' cost: two specs equal here time the same.
auto transformer_shape(const ModelSpec& s) {
  return std::tie(s.family, s.n_layer, s.n_head, s.d_model, s.seq_len, s.vocab_size,
                  s.vocab_multiple, s.type_vocab, s.dropout, s.tied_embedding);
}
}  // namespace

std::array<double, 3> medians_per_round(const PartRounds& rounds,
                                        const std::vector<double>& reference) {
  std::array<double, 3> out{};
  for (size_t k = 0; k < 3; ++k) {
    STRATA_CHECK(rounds[k].size() == reference.size(), "a part timed in ", rounds[k].size(),
                 " rounds against a reference timed in ", reference.size());
    std::vector<double> x(reference.size());
    for (size_t r = 0; r < x.size(); ++r) x[r] = rounds[k][r] / std::max(reference[r], 1e-12);
    out[k] = median(x);
  }
  return out;
}

bool can_measure_parts(const ModelSpec& spec, const CostOptions& o, const HardwareProfile& hw) {
  return hw.device == "cpu" && !hw.kernels.empty() && o.precision == "fp32" &&
         is_language_model(spec.family);
}

PartScale part_scale_of(const StageCosts& m, const PartCosts& p, double reference_ratio) {
  return scale_of(times_of(m), times_of(p), reference_ratio);
}

MeasuredParts measure_part_scales(const ModelSpec& spec, const std::vector<int64_t>& micro_batches,
                                  const CostOptions& o, const HardwareProfile& hw) {
  std::vector<int64_t> timed_mbs;
  for (const int64_t mb : micro_batches)
    if (round_of(predicted_at(spec, mb, o, hw)) <= kMaxRoundSeconds) timed_mbs.push_back(mb);
  std::sort(timed_mbs.begin(), timed_mbs.end());
  MeasuredParts out;
  if (timed_mbs.empty()) return out;
  // As the trainer runs them: hw's threads per rank, and freed blocks kept for reuse
  // (without, the heap's history decided whether the head's logits were re-faulted:
  // the debug GPT's head at micro-batch 4 timed 34 or 51 ms in two plans for 2 and 1
  // ranks).
  keep_freed_host_memory();
  const ThreadsFor threads(hw.threads);
  ModelConfig rc;
  rc.flavour = "debug";
  const ModelSpec ref = resolve_model_spec(rc, DataShape{});
  const bool is_ref = transformer_shape(ref) == transformer_shape(spec);
  // Note [the reference timed twice a round]: every factor is over the reference's
  // whole in the same round, so the reference's own noise moved all of a plan's factors
  // together: four plans in a row priced BERT-debug's dp=2 layout at micro-batch 2 at
  // 219-247 ms. It is timed at both ends of each round, and the round's whole is their
  // mean, which also follows the machine's speed over the round better than one end.
  std::vector<PartsToTime> jobs{{ref, kReferenceMicroBatch}};
  for (const int64_t mb : timed_mbs) jobs.push_back({spec, mb});
  // The reference model is the planned one, or timed beside it.
  const auto own = std::find(timed_mbs.begin(), timed_mbs.end(), kReferenceMicroBatch);
  const size_t ref_at = is_ref && own != timed_mbs.end()
                            ? static_cast<size_t>(own - timed_mbs.begin()) + 1
                            : jobs.size();
  if (ref_at == jobs.size()) jobs.push_back({ref, kReferenceMicroBatch});
  // Note [parts timed per round]: each round's times are taken over the reference
  // model's whole in the same round before their medians, so that the machine's speed,
  // which moves within seconds here, cancels round by round instead of only in the
  // medians' ratio. With the medians taken first, six plans in a row of BERT-debug on 2
  // ranks (a quiet machine) priced its dp=2 layout at micro-batch 2 at 81.9-88.9 ms and
  // its pp=2 GPipe at 16 at 150.6-159.8; per round, 83.5-86.8 and 156.1-162.9 (beside a
  // bench, the old way had moved its one-rank step from 148 to 174 ms between two plans).
  // (Note [rounds sized by their first]: about kTimedSeconds of timed runs.)
  const std::vector<PartRounds> rounds =
      time_part_rounds(jobs, at::kCPU, RoundBudget{kTimedSeconds, kLeastRounds, 200});
  const size_t n = rounds[ref_at][0].size();
  auto whole_at = [&](const PartRounds& rt, size_t r) {
    return whole(ref, times_of(stage_costs_of(ref, {rt[0][r], rt[1][r], rt[2][r]})));
  };
  std::vector<double> ref_whole(n);
  for (size_t r = 0; r < n; ++r)
    ref_whole[r] = (whole_at(rounds[0], r) + whole_at(rounds[ref_at], r)) / 2;
  std::vector<PartTimes> timed;
  for (size_t j = 0; j < jobs.size(); ++j)
    timed.push_back(
        times_of(stage_costs_of(jobs[j].first, medians_per_round(rounds[j], ref_whole))));
  // The reference's parts are both timings' mean (the planned model's own, when it is
  // the reference).
  timed[ref_at] = {(timed[0].block + timed[ref_at].block) / 2,
                   (timed[0].first + timed[ref_at].first) / 2,
                   (timed[0].last + timed[ref_at].last) / 2};
  const PartTimes rm = timed[ref_at];
  const PartTimes rp = predicted_at(ref, kReferenceMicroBatch, o, hw);
  const double ref_ratio = whole(ref, rm) / whole(ref, rp);
  // A bounded part (an embedding timed as nothing under load) leaves the reference's
  // factors summing to other than its kernels' whole: every factor is divided by what
  // they make of it, so the reference is priced exactly as its kernels are.
  const PartScale rk = scale_of(rm, rp, ref_ratio);
  const double norm =
      whole(ref, {rk.block * rp.block, rk.first * rp.first, rk.last * rp.last}) / whole(ref, rp);
  for (size_t i = 0; i < timed_mbs.size(); ++i) {
    PartScale k = scale_of(timed[i + 1], predicted_at(spec, timed_mbs[i], o, hw), ref_ratio);
    k.block /= norm, k.first /= norm, k.last /= norm;
    out.scale[timed_mbs[i]] = k;
  }
  out.largest_timed = timed_mbs.back();
  for (const int64_t mb : micro_batches)
    if (!out.scale.count(mb)) out.scale[mb] = out.scale.at(out.largest_timed);
  return out;
}

std::optional<MeasuredParts> time_parts_into(CostOptions& o, const ModelSpec& spec,
                                             const std::vector<int64_t>& micro_batches,
                                             const HardwareProfile& hw) {
  if (!can_measure_parts(spec, o, hw)) return std::nullopt;
  MeasuredParts parts = measure_part_scales(spec, micro_batches, o, hw);
  o.part_scale = parts.scale;
  return parts;
}

}  // namespace strata
