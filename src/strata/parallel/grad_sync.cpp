#include "strata/parallel/grad_sync.h"

#include <ATen/ATen.h>

#include <cmath>

#include "strata/distributed/comm.h"
#include "strata/memory/category.h"
#include "strata/memory/tracking_allocator.h"

namespace strata {

LocalGradSync::LocalGradSync(std::vector<NamedParam> params) : params_(std::move(params)) {
  // Note [gradient buffers]: gradients are allocated once, before the first backward,
  // and accumulated into in place; zero_grad zeroes them. So the gradients category
  // is exactly the .grad buffers, and steady-state memory is the same from the first
  // step on.
  MemoryScope scope(Category::kGradients);
  for (auto& np : params_) np.param.mutable_grad() = at::zeros_like(np.param);
}

double LocalGradSync::grad_norm_squared() {
  return strata::grad_norm_squared(params_);
}

void LocalGradSync::zero_grad() {
  zero_grads(params_);
}

void LocalGradSync::inject_inf() {
  if (params_.empty()) return;
  at::NoGradGuard no_grad;
  params_[0].param.mutable_grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
}

double WrappedGradSync::norm_squared_summed_over(Comm& axis,
                                                 const std::vector<NamedParam>& params) {
  const double own =
      params.empty() ? inner_->grad_norm_squared() : strata::grad_norm_squared(params);
  at::Tensor t = at::full({1}, own, at::kDouble);
  axis.all_reduce(t).wait();
  return t.item<double>();
}

}  // namespace strata
