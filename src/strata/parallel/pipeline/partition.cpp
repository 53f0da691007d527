#include "strata/parallel/pipeline/partition.h"

#include <c10/util/StringUtil.h>

#include <limits>
#include <sstream>

#include "strata/core/errors.h"

namespace strata {

namespace {
// Cost and memory of blocks [begin, end) on stage s of `stages`.
struct StageLoad {
  double cost = 0, bytes = 0;
};
StageLoad stage_load(const StageCosts& c, int64_t begin, int64_t end, int64_t s, int64_t stages) {
  StageLoad l;
  for (int64_t b = begin; b < end; ++b) {
    l.cost += c.block[static_cast<size_t>(b)];
    if (!c.block_bytes.empty()) l.bytes += c.block_bytes[static_cast<size_t>(b)];
  }
  if (s == 0) {
    l.cost += c.first;
    l.bytes += c.first_bytes;
  }
  if (s == stages - 1) {
    l.cost += c.last;
    l.bytes += c.last_bytes;
  }
  if (!c.in_flight.empty()) l.bytes *= c.in_flight[static_cast<size_t>(s)];
  return l;
}
}  // namespace

std::vector<int64_t> uniform_partition(int64_t blocks, int64_t stages) {
  STRATA_CHECK(stages >= 1 && blocks >= stages, "parallel.pp=", stages, " needs at least ", stages,
               " blocks (the model has ", blocks, "); use parallel.pp <= ", blocks);
  std::vector<int64_t> out(static_cast<size_t>(stages), blocks / stages);
  for (int64_t s = 0; s < blocks % stages; ++s) ++out[static_cast<size_t>(s)];
  return out;
}

std::vector<int64_t> parse_partition(const std::string& text, int64_t blocks, int64_t stages) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  int64_t sum = 0;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t n = -1;
    try {
      n = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK(used == item.size() && n >= 1, "parallel.pp_partition='", text, "': '", item,
                 "' is not a block count of at least 1; write blocks per stage, e.g. '",
                 c10::Join(",", uniform_partition(std::max(blocks, stages), stages)), "'");
    out.push_back(n);
    sum += n;
  }
  STRATA_CHECK(static_cast<int64_t>(out.size()) == stages && sum == blocks,
               "parallel.pp_partition='", text, "' gives ", out.size(), " stages and ", sum,
               " blocks; it needs pp=", stages, " counts summing to the model's ", blocks,
               " blocks, e.g. '", c10::Join(",", uniform_partition(blocks, stages)), "'");
  return out;
}

StageCosts transformer_stage_costs(const ModelSpec& s) {
  STRATA_CHECK(s.family == Family::kGpt || s.family == Family::kBert, s.flavour,
               " has no transformer blocks to balance over pipeline stages; use parallel.pp=1");
  const auto C = static_cast<double>(s.d_model), T = static_cast<double>(s.seq_len);
  StageCosts c;
  c.block.assign(static_cast<size_t>(s.n_layer), 72.0 * C * C + 12.0 * C * T);
  c.last = 6.0 * C * static_cast<double>(s.padded_vocab());
  return c;
}

double slowest_stage(const StageCosts& costs, const std::vector<int64_t>& partition) {
  double worst = 0;
  int64_t begin = 0;
  const auto stages = static_cast<int64_t>(partition.size());
  for (int64_t s = 0; s < stages; ++s) {
    const int64_t end = begin + partition[static_cast<size_t>(s)];
    worst = std::max(worst, stage_load(costs, begin, end, s, stages).cost);
    begin = end;
  }
  return worst;
}

std::vector<int64_t> balanced_partition(const StageCosts& costs, int64_t stages) {
  const auto blocks = static_cast<int64_t>(costs.block.size());
  uniform_partition(blocks, stages);  // the same error for too few blocks
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][j]: the smallest slowest-stage cost of stages 0..s holding blocks 0..j-1;
  // cut[s][j]: where stage s begins in it.
  const auto S = static_cast<size_t>(stages), L = static_cast<size_t>(blocks);
  std::vector<std::vector<double>> best(S, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int64_t>> cut(S, std::vector<int64_t>(L + 1, -1));
  auto fits = [&](const StageLoad& l, int64_t s) {
    return costs.capacity.empty() || l.bytes <= costs.capacity[static_cast<size_t>(s)];
  };
  for (int64_t j = 1; j <= blocks; ++j) {
    const StageLoad l = stage_load(costs, 0, j, 0, stages);
    if (fits(l, 0)) best[0][static_cast<size_t>(j)] = l.cost;
  }
  for (int64_t s = 1; s < stages; ++s)
    for (int64_t j = s + 1; j <= blocks; ++j)
      // Later cuts first: on a tie the earlier stages keep more blocks.
      for (int64_t i = j - 1; i >= s; --i) {
        const double before = best[static_cast<size_t>(s - 1)][static_cast<size_t>(i)];
        if (before == kInf) continue;
        const StageLoad l = stage_load(costs, i, j, s, stages);
        if (!fits(l, s)) continue;
        const double v = std::max(before, l.cost);
        if (v < best[static_cast<size_t>(s)][static_cast<size_t>(j)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(j)] = v;
          cut[static_cast<size_t>(s)][static_cast<size_t>(j)] = i;
        }
      }
  STRATA_CHECK(best[S - 1][L] < kInf, "no partition of ", blocks, " blocks into pp=", stages,
               " stages fits each stage's memory; use more stages, recompute, or a smaller ",
               "micro-batch");
  std::vector<int64_t> out(S);
  int64_t j = blocks;
  for (int64_t s = stages - 1; s >= 1; --s) {
    const int64_t i = cut[static_cast<size_t>(s)][static_cast<size_t>(j)];
    out[static_cast<size_t>(s)] = j - i;
    j = i;
  }
  out[0] = j;
  return out;
}

std::vector<int64_t> stage_partition(const ModelSpec& spec, const std::string& how, int64_t stages,
                                     int64_t v, const StageCosts* measured) {
  // A program's own model has no cost formula: "auto" cuts it evenly.
  if (how == "uniform" || (how == "auto" && (v > 1 || spec.family == Family::kCustom)))
    return uniform_partition(spec.n_layer, stages);
  if (how == "auto")
    return balanced_partition(measured ? *measured : transformer_stage_costs(spec), stages);
  return parse_partition(how, spec.n_layer, stages);
}

}  // namespace strata
