#include "strata/parallel/tensor/tp_grad_sync.h"

#include <ATen/ATen.h>

namespace strata {

TensorParallelGradSync::TensorParallelGradSync(std::unique_ptr<GradSync> inner,
                                               std::vector<NamedParam> params, Comm& tp)
    : WrappedGradSync(std::move(inner)), params_(std::move(params)), tp_(tp) {}

std::string TensorParallelGradSync::describe() const {
  return inner_->describe() + c10::str("; gradient norm summed over tp=", tp_.size());
}

double TensorParallelGradSync::grad_norm_squared() {
  // The inner sync has made the gradients the dp average; here only the tp sum. With
  // no parameters given the inner sync's norm is this tp rank's (ZeRO: its weighted
  // shards, summed over dp).
  const double own =
      params_.empty() ? inner_->grad_norm_squared() : strata::grad_norm_squared(params_);
  at::Tensor t = at::full({1}, own, at::kDouble);
  tp_.all_reduce(t).wait();
  return t.item<double>();
}

}  // namespace strata
