#pragma once
#include <cstdint>

#include "strata/core/state.h"

namespace strata {

struct LossScalerOptions {
  bool enabled = false;  // fp16 only: bf16 and fp32 have fp32's range
  double init_scale = 65536, growth_factor = 2, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// Dynamic loss scaling with torch.cuda.amp.GradScaler's rule: the loss is multiplied
// by scale() before backward; a step whose gradients hold an inf or NaN is skipped and
// the scale multiplied by backoff_factor; after growth_interval overflow-free steps in a
// row it is multiplied by growth_factor. Pure state: the caller finds the overflow
// (globally, across every rank) and skips the step.
class LossScaler : public Stateful {
 public:
  explicit LossScaler(LossScalerOptions opts);
  bool enabled() const { return opts_.enabled; }
  double scale() const { return opts_.enabled ? scale_ : 1.0; }

  // Records one step's outcome; returns true when the step is to be applied.
  bool update(bool found_inf);

  struct State {
    double scale = 1;
    int64_t growth_tracker = 0;  // overflow-free steps since the last change
    int64_t skipped = 0;         // steps skipped so far
  };
  State state() const { return {scale_, growth_tracker_, skipped_}; }
  void set_state(const State& s);
  // "scaler.state" (scale, growth tracker, skipped), written by one rank.
  void save_state(std::vector<TensorPiece>& out) override;
  void load_state(const PieceReader& in) override;
  void set_writes_state(bool writes) { writes_state_ = writes; }

 private:
  LossScalerOptions opts_;
  double scale_;
  int64_t growth_tracker_ = 0, skipped_ = 0;
  bool writes_state_ = true;
};

}  // namespace strata
