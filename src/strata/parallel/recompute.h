#pragma once
#include <cstdint>

#include "strata/memory/recompute.h"
#include "strata/models/model.h"

namespace strata {

// Applies a recompute mode to a model part (parallelize's recompute step): segments
// over the blocks this part holds, run through memory/recompute's checkpoint
// (Note [activation recompute]). An Error names a mode the model cannot use
// (selective without attention, recompute_k out of range).
void apply_recompute(Model& model, RecomputeMode mode, int64_t k);

}  // namespace strata
