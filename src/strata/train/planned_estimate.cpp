#include "strata/train/planned_estimate.h"

#include <algorithm>

#include "strata/train/data/source.h"

namespace strata {

PlannedEstimate plan_and_estimate(const Config& cfg, int64_t world_size) {
  validate_config(cfg);
  const auto& p = cfg.parallel;
  if (world_size <= 0) world_size = std::max<int64_t>(1, p.dp) * p.tp * p.pp;
  PlannedEstimate out;
  out.plan = plan_run(cfg, world_size, open_data_source(cfg).shape);
  out.input = estimate_input(cfg, out.plan);
  out.estimate = estimate_memory(out.input);
  return out;
}

}  // namespace strata
