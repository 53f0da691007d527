#pragma once
#include <memory>
#include <vector>

#include "strata/distributed/comm.h"
#include "strata/parallel/grad_sync.h"

namespace strata {

// Data parallelism of a tensor-parallel part: everything is the inner GradSync's (DDP,
// ZeRO or local over the dp axis), except the gradient norm, which must count each
// parameter once over the tp ranks: slices are summed over tp, tensors every tp rank
// holds whole (layer norms, row-parallel biases, position embeddings) enter with
// weight 1/tp (NamedParam::norm_weight) so the sum counts them once. Empty params:
// the inner sync weighs its own (ZeRO's shards carry the weights).
class TensorParallelGradSync : public WrappedGradSync {
 public:
  TensorParallelGradSync(std::unique_ptr<GradSync> inner, std::vector<NamedParam> params, Comm& tp);
  std::string describe() const override;
  double grad_norm_squared() override;

 private:
  std::vector<NamedParam> params_;
  Comm& tp_;
};

}  // namespace strata
