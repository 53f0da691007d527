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
  // The inner sync has made the gradients the dp average; here only the tp sum.
  return norm_squared_summed_over(tp_, params_);
}

}  // namespace strata
