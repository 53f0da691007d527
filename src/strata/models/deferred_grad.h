#pragma once
#include <ATen/Tensor.h>

#include <vector>

namespace strata {

// Note [deferred weight gradients]: zero-bubble pipeline schedules split a stage's
// backward into B (the input gradient, which the previous stage waits for) and W (the
// weight gradients, which nobody waits for and which fill the bubbles; Qi et al.
// 2023). A linear marked deferrable (ParallelLinear::defer_weight_grad) computes its
// input and bias gradients in backward as usual; while a WeightGradDeferral is alive,
// it queues (output gradient, input, weight) instead of computing dW = gyᵀ x, and
// apply_weight_grads later accumulates each into weight.grad. Without a live deferral
// it computes dW at once, so the same model runs every other schedule unchanged. The
// matmuls of the other parameters (norms, embeddings, the tied head) stay in B: they
// are small beside the linears'. The queued tensors are what autograd would have kept
// for the backward anyway, held until W.
struct DeferredWeightGrad {
  at::Tensor grad_output, input, weight;
};

class WeightGradDeferral {
 public:
  explicit WeightGradDeferral(std::vector<DeferredWeightGrad>& queue);
  ~WeightGradDeferral();
  WeightGradDeferral(const WeightGradDeferral&) = delete;
  WeightGradDeferral& operator=(const WeightGradDeferral&) = delete;

 private:
  std::vector<DeferredWeightGrad>* previous_;
};

// Accumulates every queued dW into its weight's .grad (created if absent) and empties
// the queue.
void apply_weight_grads(std::vector<DeferredWeightGrad>& queue);

// torch::nn::functional::linear whose weight gradient a live WeightGradDeferral defers.
at::Tensor deferrable_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace strata
