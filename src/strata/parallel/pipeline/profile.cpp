#include "strata/parallel/pipeline/profile.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "strata/core/errors.h"
#include "strata/core/stats.h"
#include "strata/models/build.h"

namespace strata {

namespace {
// Parts whose first timed run took at least this long run cold after the first round
// (Note [warm-up runs where they count]).
constexpr double kWarmUpsBelow = 0.025;
// One part of the model and a micro-batch for it, timed one forward and backward at a time.
class TimedPart {
 public:
  TimedPart(const ModelSpec& spec, StageInfo stage, int64_t micro, at::Device device)
      : stage_(stage), device_(device), part_(build_model(spec, stage)) {
    part_->to(device);
    const auto ints = at::TensorOptions().dtype(at::kLong).device(device);
    batch_.input = at::randint(spec.vocab_size, {micro, spec.seq_len}, ints);
    batch_.target = at::randint(spec.vocab_size, {micro, spec.seq_len}, ints);
    if (spec.family == Family::kBert) batch_.token_type = at::zeros({micro, spec.seq_len}, ints);
    if (!stage.first) x_shape_ = {micro, spec.seq_len, spec.d_model};
  }
  double once() {
    at::Tensor x;
    if (!stage_.first)
      x = at::randn(x_shape_, at::TensorOptions().device(device_)).requires_grad_(true);
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor out = part_->forward_part(x, batch_);
    if (stage_.last)
      out.backward();
    else
      out.backward(at::ones_like(out));
    if (device_.is_cuda()) at::zeros({1}, at::TensorOptions().device(device_)).item<float>();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  StageInfo stage_;
  at::Device device_;
  std::shared_ptr<Model> part_;
  Batch batch_;
  std::vector<int64_t> x_shape_;
};
}  // namespace

std::vector<PartRounds> time_part_rounds(const std::vector<PartsToTime>& models, at::Device device,
                                         int repeats) {
  STRATA_CHECK(repeats >= 1, "profile repeats must be at least 1");
  return time_part_rounds(models, device, RoundBudget{0, repeats, repeats});
}

// Note [rounds sized by their first]: the plan times its parts for about a fixed time,
// so how many rounds depends on how long one takes. That was a separate sizing round
// on parts built for it alone, then built again for the rounds: every part built
// twice, and run twice more than it counted for (the d384 GPT's parts at four
// micro-batches took 11 s a plan). The first round is now timed like the others, and
// decides how many follow.
namespace {
void check_budget(const RoundBudget& budget) {
  STRATA_CHECK(budget.least >= 1 && budget.most >= budget.least,
               "profile rounds must be at least 1, the most no fewer than the least");
}
}  // namespace

int rounds_for(const RoundBudget& budget, double round_s) {
  check_budget(budget);
  const double wanted = budget.seconds / std::max(round_s, 1e-6);
  return static_cast<int>(
      std::clamp(wanted, static_cast<double>(budget.least), static_cast<double>(budget.most)));
}

std::vector<PartRounds> time_part_rounds(const std::vector<PartsToTime>& models, at::Device device,
                                         const RoundBudget& budget) {
  check_budget(budget);  // before anything is built
  std::vector<TimedPart> parts;
  for (const auto& [spec, micro_batch] : models) {
    STRATA_CHECK(spec.family == Family::kGpt || spec.family == Family::kBert, spec.flavour,
                 " has no transformer blocks to balance over pipeline stages; use parallel.pp=1");
    ModelSpec one = spec;
    one.n_layer = 1;
    parts.emplace_back(one, StageInfo{0, 1, false, false}, micro_batch, device);  // a block
    parts.emplace_back(one, StageInfo{0, 1, true, false}, micro_batch, device);   // + embedding
    parts.emplace_back(one, StageInfo{0, 1, false, true}, micro_batch, device);   // + head, loss
  }
  // Round-robin, so that a change of load while profiling (other processes on the
  // machine) shifts all parts alike rather than one difference.
  //
  // Note [a part timed warm]: each part runs once untimed right before its timed run.
  // A trainer runs the same shapes micro-batch after micro-batch, so its weights,
  // gradients and freed blocks are at hand; timed straight after another part (a
  // larger micro-batch's head, say), a small part paid for fetching them again. The
  // debug GPT's block at micro-batch 1 timed 2.07 ms in the round-robin and 1.45 ms
  // timed alone, and `strata plan` priced its dp=2 layouts at micro-batch 1 20-25%
  // over their runs (one rank, 8 sequences a step, ran 103, 105 and 111 ms a step at
  // micro-batches 1, 2 and 4: no dearer at 1). Warm, its block at micro-batch 1 timed
  // 0.99-1.00x the reference's rate in three plans in a row (1.20x before), and those
  // layouts priced within 16% (chain c19).
  //
  // Note [warm-up runs where they count]: what a part fetches again when timed cold
  // (its weights, its freed blocks) is a fixed cost of a few hundred microseconds, a
  // third of the debug GPT's block at micro-batch 1 but under 2% of a part that runs
  // kWarmUpsBelow or longer. After the first round, where every part runs warm, only
  // the parts that ran shorter keep their untimed run: the heads and the larger
  // micro-batches' parts, most of a round's time, no longer run twice, and the plan's
  // few seconds hold more rounds.
  std::vector<PartRounds> out(models.size());
  auto run = [&](int rounds, const std::vector<bool>& warm) {
    double timed = 0;
    for (const PartRun& r : part_run_order(parts.size(), rounds, warm)) {
      const double t = parts[r.part].once();
      if (!r.timed) continue;
      out[r.part / 3][r.part % 3].push_back(t);
      timed += t;
    }
    return timed;
  };
  const double first = run(1, {});
  std::vector<bool> warm(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) warm[p] = out[p / 3][p % 3].front() < kWarmUpsBelow;
  run(rounds_for(budget, first) - 1, warm);
  return out;
}

std::vector<PartRun> part_run_order(size_t parts, int repeats, const std::vector<bool>& warm) {
  STRATA_CHECK(warm.empty() || warm.size() == parts, "warm-up flags for ", warm.size(),
               " parts where ", parts, " are timed");
  // No separate warm-up pass: each part's first untimed run is its warm-up.
  std::vector<PartRun> order;
  for (int i = 0; i < repeats; ++i)
    for (size_t p = 0; p < parts; ++p) {
      if (warm.empty() || warm[p]) order.push_back({p, false});
      order.push_back({p, true});
    }
  return order;
}

StageCosts stage_costs_of(const ModelSpec& spec, const std::array<double, 3>& t) {
  const double block = std::max(t[0], 1e-9);
  StageCosts c;
  c.block.assign(static_cast<size_t>(spec.n_layer), block);
  // Noise can still make a difference negative; an end part costs at least nothing.
  c.first = std::max(t[1] - block, 0.0);
  c.last = std::max(t[2] - block, 0.0);
  return c;
}

std::vector<StageCosts> profile_stage_costs(const std::vector<PartsToTime>& models,
                                            at::Device device, int repeats) {
  const std::vector<PartRounds> rounds = time_part_rounds(models, device, repeats);
  std::vector<StageCosts> out;
  for (size_t m = 0; m < models.size(); ++m)
    out.push_back(stage_costs_of(
        models[m].first, {median(rounds[m][0]), median(rounds[m][1]), median(rounds[m][2])}));
  return out;
}

StageCosts profile_stage_costs(const ModelSpec& spec, int64_t micro_batch, at::Device device,
                               int repeats) {
  return profile_stage_costs({{spec, micro_batch}}, device, repeats).front();
}

}  // namespace strata
