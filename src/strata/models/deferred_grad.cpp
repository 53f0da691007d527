#include "strata/models/deferred_grad.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/linear.h>

#include <atomic>

#include "strata/core/errors.h"
#include "strata/memory/tracking_allocator.h"

namespace strata {

namespace {
// The live deferral's queue. Not thread-local: on a GPU the autograd engine runs
// backward on its device thread, not the one that opened the deferral.
std::atomic<std::vector<DeferredWeightGrad>*> g_queue{nullptr};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor rows(const at::Tensor& t) {
  return t.reshape({-1, t.size(-1)});
}

// dx = gy W and db = Σ gy now; dW = gyᵀ x now, or queued while a deferral is live.
variable_list linear_backward(AutogradContext* ctx, const at::Tensor& gy, bool with_bias) {
  const at::Tensor x = ctx->get_saved_variables()[0];
  const at::Tensor weight = ctx->saved_data["weight"].toTensor();
  // Under autocast the forward computed in gy's dtype from weights kept in theirs.
  const at::Tensor gx = gy.matmul(weight.to(gy.scalar_type())).to(x.scalar_type());
  at::Tensor gw;
  if (std::vector<DeferredWeightGrad>* queue = g_queue.load()) {
    queue->push_back({gy, x, weight});
  } else {
    gw = rows(gy).t().mm(rows(x).to(gy.scalar_type())).to(weight.scalar_type());
  }
  if (!with_bias) return {gx, gw};
  return {gx, gw, rows(gy).sum(0)};
}

class DeferrableLinear : public torch::autograd::Function<DeferrableLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    ctx->save_for_backward({x});
    ctx->saved_data["weight"] = weight;
    return torch::nn::functional::linear(x, weight, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*with_bias=*/true);
  }
};

// Autograd functions take no undefined tensors: a linear without bias is its own.
class DeferrableLinearNoBias : public torch::autograd::Function<DeferrableLinearNoBias> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->save_for_backward({x});
    ctx->saved_data["weight"] = weight;
    return torch::nn::functional::linear(x, weight);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*with_bias=*/false);
  }
};
}  // namespace

WeightGradDeferral::WeightGradDeferral(std::vector<DeferredWeightGrad>& queue)
    : previous_(g_queue.exchange(&queue)) {}

WeightGradDeferral::~WeightGradDeferral() {
  g_queue.store(previous_);
}

void apply_weight_grads(std::vector<DeferredWeightGrad>& queue) {
  at::NoGradGuard no_grad;
  MemoryScope scope(Category::kGradients);
  for (DeferredWeightGrad& d : queue) {
    at::Tensor gw = rows(d.grad_output)
                        .t()
                        .mm(rows(d.input).to(d.grad_output.scalar_type()))
                        .to(d.weight.scalar_type());
    at::Tensor& grad = d.weight.mutable_grad();
    if (grad.defined()) {
      grad.add_(gw);
    } else {
      grad = gw;
    }
  }
  queue.clear();
}

at::Tensor deferrable_linear(const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& bias) {
  return bias.defined() ? DeferrableLinear::apply(x, weight, bias)
                        : DeferrableLinearNoBias::apply(x, weight);
}

}  // namespace strata
