#include "strata/memory/loss_scaler.h"

namespace strata {

LossScaler::LossScaler(LossScalerOptions opts) : opts_(opts), scale_(opts.init_scale) {}

bool LossScaler::update(bool found_inf) {
  if (!opts_.enabled) return true;
  if (found_inf) {
    scale_ *= opts_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
    return false;
  }
  if (++growth_tracker_ == opts_.growth_interval) {
    scale_ *= opts_.growth_factor;
    growth_tracker_ = 0;
  }
  return true;
}

void LossScaler::set_state(const State& s) {
  scale_ = s.scale;
  growth_tracker_ = s.growth_tracker;
  skipped_ = s.skipped;
}

}  // namespace strata
