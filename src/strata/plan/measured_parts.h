#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "strata/models/flavours.h"
#include "strata/parallel/pipeline/partition.h"
#include "strata/parallel/pipeline/profile.h"
#include "strata/plan/cost_model.h"
#include "strata/plan/profile.h"

namespace strata {

// The calibration's reference run (Note [step calibration]): the debug GPT, data
// parallel, this many sequences per micro-batch.
inline constexpr int64_t kReferenceMicroBatch = 4;

// Each part's median over the rounds of its time over the reference's in the same
// round (Note [parts timed per round]).
std::array<double, 3> medians_per_round(const PartRounds& rounds,
                                        const std::vector<double>& reference);

// Whether spec's parts can be timed here for hw: a calibrated CPU profile (this
// machine's, which the timing assumes), a transformer and fp32 (the parts are built in
// fp32).
bool can_measure_parts(const ModelSpec& spec, const CostOptions& o, const HardwareProfile& hw);

// Times spec's block, embedding and head at each micro-batch on this machine (hw's
// threads per rank) and returns the factors that bring the kernels' sum to them,
// relative to the reference model's (Note [measured parts]). Micro-batches whose parts
// would take too long to time take the factors of the largest one timed; none at all
// when even the smallest would (largest_timed 0).
struct MeasuredParts {
  std::map<int64_t, PartScale> scale;  // by micro-batch
  int64_t largest_timed = 0;
};
MeasuredParts measure_part_scales(const ModelSpec& spec, const std::vector<int64_t>& micro_batches,
                                  const CostOptions& o, const HardwareProfile& hw);

// Where can_measure_parts allows: times the parts and sets o.part_scale from them;
// returns what was timed, or nothing where the parts cannot be timed here.
std::optional<MeasuredParts> time_parts_into(CostOptions& o, const ModelSpec& spec,
                                             const std::vector<int64_t>& micro_batches,
                                             const HardwareProfile& hw);

// The factors for one micro-batch from measured and predicted parts (seconds, forward
// and backward of one micro-batch each), over the reference's whole-model ratio
// (measured over predicted). Pure: the arithmetic of measure_part_scales.
PartScale part_scale_of(const StageCosts& measured, const PartCosts& predicted,
                        double reference_ratio);

}  // namespace strata
