#pragma once
#include <string>

#include "strata/core/state.h"

namespace strata {

// One interface for every optimizer a run can hold: AdamW over whole parameters
// (optim/adamw.h) and ZeRO's AdamW over this rank's shards (parallel/zero). The
// trainer steps it and checkpoints it and never asks which it holds. Its state is the
// trainable weights at full precision ("model.<name>": fp32 masters where there are
// some, so a run resumes under any precision) and the moments.
class Optimizer : public Stateful {
 public:
  // One update at learning rate lr on the gradients times grad_scale (unscaling and
  // clipping folded into one factor).
  virtual void step(double lr, double grad_scale) = 0;
  virtual std::string describe() const = 0;
};

}  // namespace strata
