#include "strata/memory/loss_scaler.h"

#include <ATen/ATen.h>

#include "strata/core/errors.h"

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

void LossScaler::save_state(std::vector<TensorPiece>& out) {
  if (!opts_.enabled || !writes_state_) return;
  out.push_back(
      {"scaler.state",
       at::tensor({scale_, static_cast<double>(growth_tracker_), static_cast<double>(skipped_)},
                  at::kDouble),
       {},
       {}});
}

void LossScaler::load_state(const PieceReader& in) {
  if (!opts_.enabled) return;
  STRATA_CHECK(in.has("scaler.state"),
               "the checkpoint has no loss-scaler state (it was not written by an fp16 run); "
               "resume with the precision it was written with");
  at::Tensor sc = at::zeros({3}, at::kDouble);
  in.read("scaler.state", sc);
  set_state({sc[0].item<double>(), static_cast<int64_t>(sc[1].item<double>()),
             static_cast<int64_t>(sc[2].item<double>())});
}

}  // namespace strata
