#include "strata/parallel/zero/sharded_optimizer.h"

#include <ATen/ATen.h>

namespace strata {

namespace {
at::Tensor host_buffer(const at::Tensor& like_device) {
  // Pinned host memory makes the device copies asynchronous-capable and faster.
  auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
  return at::zeros({like_device.numel()}, opts.pinned_memory(like_device.is_cuda()));
}
}  // namespace

ShardedOptimizer::ShardedOptimizer(std::vector<ShardPiece> pieces, AdamWOptions opts,
                                   bool master_weights, bool offload)
    : pieces_(std::move(pieces)), offload_(offload) {
  at::NoGradGuard no_grad;
  std::vector<NamedParam> named;
  for (auto& p : pieces_) {
    if (offload_) {
      // The only copy the optimizer touches lives on the host, in fp32.
      at::Tensor v = host_buffer(p.grad);
      v.copy_(p.value);
      at::Tensor g = host_buffer(p.grad);
      host_values_.push_back(v);
      host_grads_.push_back(g);
      named.push_back({p.name, v, g, p.decay ? 1 : 0});
    } else {
      named.push_back({p.name, p.value, p.grad, p.decay ? 1 : 0});
    }
  }
  adam_ = std::make_unique<AdamW>(std::move(named), opts, master_weights && !offload_);
}

double ShardedOptimizer::grad_norm_squared() const {
  std::vector<NamedParam> g;
  for (auto& p : pieces_) {
    g.push_back({p.name, p.grad, p.grad});
    g.back().norm_weight = p.norm_weight;
  }
  return strata::grad_norm_squared(g);
}

void ShardedOptimizer::step(double lr, double grad_scale, size_t begin, size_t end) {
  at::NoGradGuard no_grad;
  end = std::min(end, pieces_.size());
  if (!offload_) {
    adam_->step(lr, grad_scale, begin, end);
    return;
  }
  for (size_t i = begin; i < end; ++i) host_grads_[i].copy_(pieces_[i].grad);
  adam_->step(lr, grad_scale, begin, end);
  for (size_t i = begin; i < end; ++i)
    if (pieces_[i].value.defined()) pieces_[i].value.copy_(host_values_[i]);
}

void ShardedOptimizer::drop_device_values() {
  for (auto& p : pieces_) p.value = at::Tensor();
}

at::Tensor ShardedOptimizer::master(size_t i) {
  if (offload_) return host_values_[i];
  auto& s = adam_->state()[i];
  return s.master.defined() ? s.master : pieces_[i].value;
}

void ShardedOptimizer::set_value(size_t i, const at::Tensor& v) {
  at::NoGradGuard no_grad;
  if (offload_) host_values_[i].copy_(v);
  auto& s = adam_->state()[i];
  if (s.master.defined()) s.master.copy_(v);
  if (pieces_[i].value.defined()) pieces_[i].value.copy_(v);
}

}  // namespace strata
