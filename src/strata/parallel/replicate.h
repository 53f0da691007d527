#pragma once
#include <ATen/Tensor.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "strata/distributed/comm.h"

namespace torch::autograd {
struct Node;
}

namespace strata {

// What every data-parallel wrapper (DDP, ZeRO) does when it takes a model: check that
// the ranks built the same thing, then make them hold the same values.

// Fails on every rank with the same message naming the first parameter that differs
// (name, shape or dtype) between rank 0 and some rank; names[i] describes tensors[i].
void verify_same_parameters(Comm& comm, const std::vector<std::string>& names,
                            const std::vector<at::Tensor>& tensors, const std::string& who);

// Broadcasts tensors from root with few collectives: same-dtype runs are packed into
// flat chunks (at most 64 MiB, tagged as communication buffers), sent, and copied back.
void broadcast_coalesced(Comm& comm, const std::vector<at::Tensor>& tensors, int64_t root);
// The module's buffers (BatchNorm's running statistics), broadcast from root.
void broadcast_buffers(Comm& comm, torch::nn::Module& module, int64_t root);

// Calls on_ready(i) each time autograd has accumulated a gradient into params[i]: a
// post-hook on each parameter's gradient accumulator. The accumulators are made at
// construction (while the parameters have their full shapes, which autograd records)
// and held, so they and their hooks outlive each step's graph.
class GradReadyHooks {
 public:
  GradReadyHooks(const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
                 std::function<void(int64_t)> on_ready);
  ~GradReadyHooks();
  GradReadyHooks(const GradReadyHooks&) = delete;
  GradReadyHooks& operator=(const GradReadyHooks&) = delete;
  // The accumulator of params[i] (graph walks find parameters by it).
  const torch::autograd::Node* node(size_t i) const { return accumulators_[i].get(); }

 private:
  // Note [torch 2.11 to 2.15]: autograd nodes are shared_ptr-owned in 2.11 and
  // intrusive_ptr-owned in 2.15; hold whatever grad_accumulator returns.
  using NodePtr =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<NodePtr> accumulators_;
  std::vector<uintptr_t> keys_;
};

}  // namespace strata
