#pragma once
#include <cstdint>

#include "strata/plan/plan.h"

namespace strata {

// plan_run + estimate_input for a config as `strata train` would run it on
// world_size ranks (it opens the data source for its shape: the tokenizer's
// vocabulary). world_size 0: dp * tp * pp, dp = 0 counting as 1.
struct PlannedEstimate {
  RunPlan plan;
  EstimateInput input;
  MemoryEstimate estimate;
};
PlannedEstimate plan_and_estimate(const Config& cfg, int64_t world_size = 0);

}  // namespace strata
