#pragma once
#include <ATen/Device.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "strata/models/flavours.h"
#include "strata/parallel/pipeline/partition.h"

namespace strata {

// Note [stage profile]: `auto` balances stages by costs measured on this machine
// rather than by FLOP counts, which miss what does not scale with them (the head's
// softmax and loss over a large vocabulary, memory-bound kernels, per-op overhead at
// small shapes). Three one-block parts are built and timed over one micro-batch's
// forward and backward, in turn (the median of `repeats`, each after an untimed run): a
// middle stage's (a block), the first stage's (less the block: the embedding) and the
// last stage's (less the block: the head and loss). Blocks
// of one model have one shape, so one block's time stands for all. The caller makes
// every rank agree (one set of costs, or the partitions would differ).
StageCosts profile_stage_costs(const ModelSpec& spec, int64_t micro_batch, at::Device device,
                               int repeats = 3);
// Several models or micro-batches (each with its own costs) timed in one round-robin,
// so that the machine's speed changing over the run moves them all alike.
using PartsToTime = std::pair<ModelSpec, int64_t>;  // a model and its micro-batch
std::vector<StageCosts> profile_stage_costs(const std::vector<PartsToTime>& models,
                                            at::Device device, int repeats);
// The same timing's raw rounds: per model, each part's (a block; a block and the
// embedding; a block, the head and loss) time in every round.
using PartRounds = std::array<std::vector<double>, 3>;
std::vector<PartRounds> time_part_rounds(const std::vector<PartsToTime>& models, at::Device device,
                                         int repeats);
// Rounds sized by time: the first round's timed runs decide how many rounds make about
// `seconds` of them, within [least, most] (Note [rounds sized by their first]).
struct RoundBudget {
  double seconds = 0;
  int least = 1, most = 1;
};
std::vector<PartRounds> time_part_rounds(const std::vector<PartsToTime>& models, at::Device device,
                                         const RoundBudget& budget);
// How many rounds of `round_s` seconds each make the budget's time, within its bounds.
int rounds_for(const RoundBudget& budget, double round_s);
// The order the parts run in over `repeats` rounds: every round each part timed once,
// right after an untimed run of itself where `warm` says so (every part when `warm` is
// empty; Note [a part timed warm]).
struct PartRun {
  size_t part = 0;
  bool timed = false;
};
std::vector<PartRun> part_run_order(size_t parts, int repeats, const std::vector<bool>& warm = {});
// A model's stage costs from one time of each part (the ends less the block).
StageCosts stage_costs_of(const ModelSpec& spec, const std::array<double, 3>& times);

}  // namespace strata
