#pragma once
#include "strata/models/model.h"

namespace strata {

// Marks each block's forward (begin, end) and backward (begin) in the memory
// timeline (Note [memory timeline]) while it records.
class TimelineBlockHooks : public BlockHooks {
 public:
  void pre_forward(int64_t block) override;
  at::Tensor post_forward(int64_t block, at::Tensor out) override;
};

}  // namespace strata
