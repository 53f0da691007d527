#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/models/flavours.h"

namespace strata {

// Note [stage partition]: a pipeline stage holds a contiguous range of blocks; stage 0
// also runs the embedding and the last stage the head and loss. The step is as slow as
// the slowest stage, so `auto` chooses the ranges that minimise the largest stage cost
// (forward + backward time of its blocks plus its end's extra), subject to each stage's
// memory (its blocks' bytes, weighted by how many micro-batches it holds, under a cap).
// The costs come from a profile of the blocks or from the estimator's FLOP counts.
struct StageCosts {
  std::vector<double> block;  // per block: forward + backward cost
  double first = 0;           // the embedding (stage 0)
  double last = 0;            // the head and loss (last stage)
  // Optional memory: per block bytes, each end's bytes, and per stage a capacity and a
  // multiplier (micro-batches in flight there); empty: unconstrained.
  std::vector<double> block_bytes;
  double first_bytes = 0, last_bytes = 0;
  std::vector<double> capacity, in_flight;
};

// Blocks per stage (each at least 1, summing to the blocks) minimising the slowest
// stage; ties go to the partition whose earlier stages hold more blocks. One error line
// when no partition fits the memory caps or there are fewer blocks than stages. Pure.
std::vector<int64_t> balanced_partition(const StageCosts& costs, int64_t stages);

// blocks / stages each, the first (blocks mod stages) stages one more. Pure.
std::vector<int64_t> uniform_partition(int64_t blocks, int64_t stages);

// "5,4,3": blocks per stage; one error line (naming the fix) unless it has `stages`
// positive counts summing to `blocks`. Pure.
std::vector<int64_t> parse_partition(const std::string& text, int64_t blocks, int64_t stages);

// A transformer's stage costs from its FLOP counts (forward + backward per token, the
// counts of transformer_flops_per_token): a block 72·C² + 12·C·T, the head and loss
// 6·C·V (padded vocabulary) on the last stage, the embedding's lookups nothing. What
// `auto` uses when no profile is taken. Pure; one error line for other families.
StageCosts transformer_stage_costs(const ModelSpec& spec);

// Blocks per virtual stage (p·v of them) as parallel.pp_partition says: "uniform",
// "auto" (balanced_partition of transformer_stage_costs; uniform when v > 1, which
// interleaving requires) or explicit counts (parse_partition). Pure: parallelize
// builds the stages from it and the estimator sizes them with it.
// `measured`, when given, replaces the FLOP counts for `auto` (Note [stage profile]).
std::vector<int64_t> stage_partition(const ModelSpec& spec, const std::string& how, int64_t stages,
                                     int64_t v, const StageCosts* measured = nullptr);

// The largest stage cost of a partition (stage ends included). Pure.
double slowest_stage(const StageCosts& costs, const std::vector<int64_t>& partition);

}  // namespace strata
