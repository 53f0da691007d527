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
class TensorParallelGradSync : public GradSync {
 public:
  TensorParallelGradSync(std::unique_ptr<GradSync> inner, std::vector<NamedParam> params, Comm& tp);
  std::string describe() const override;
  at::Tensor forward(const std::function<at::Tensor()>& f) override { return inner_->forward(f); }
  void set_sync(bool sync) override { inner_->set_sync(sync); }
  void finalize() override { inner_->finalize(); }
  double grad_norm_squared() override;
  void zero_grad() override { inner_->zero_grad(); }
  nlohmann::json stats() override { return inner_->stats(); }
  void inject_inf() override { inner_->inject_inf(); }
  void save_state(std::vector<TensorPiece>& out) override { inner_->save_state(out); }
  void load_state(const PieceReader& in) override { inner_->load_state(in); }

 private:
  std::unique_ptr<GradSync> inner_;
  std::vector<NamedParam> params_;
  Comm& tp_;
};

}  // namespace strata
