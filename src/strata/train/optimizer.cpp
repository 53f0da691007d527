#include "strata/train/optimizer.h"

#include <ATen/ATen.h>

#include <cmath>

namespace strata {

const at::Tensor& grad_of(const NamedParam& p) {
  return p.grad.defined() ? p.grad : p.param.grad();
}

AdamW::AdamW(std::vector<NamedParam> params, AdamWOptions opts, bool master_weights)
    : params_(std::move(params)), opts_(opts) {
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    State s;
    if (master_weights && p.param.scalar_type() != at::kFloat)
      s.master = p.param.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    const at::Tensor& w = s.master.defined() ? s.master : p.param;
    s.exp_avg = at::zeros_like(w);
    s.exp_avg_sq = at::zeros_like(w);
    state_.push_back(std::move(s));
  }
}

void AdamW::step(double lr, double grad_scale, size_t begin, size_t end) {
  at::NoGradGuard no_grad;
  for (size_t i = begin; i < std::min(end, params_.size()); ++i) {
    const at::Tensor& model_param = params_[i].param;
    at::Tensor g = grad_of(params_[i]);
    if (!g.defined()) continue;
    State& s = state_[i];
    at::Tensor p = s.master.defined() ? s.master : model_param;
    // A half gradient is widened to a transient fp32 copy of this one tensor; an
    // fp32 gradient is scaled in place (as clip_grad_norm_ and GradScaler do).
    if (g.scalar_type() != p.scalar_type()) g = g.to(p.scalar_type());
    if (grad_scale != 1.0) g.mul_(grad_scale);
    s.step += 1;
    const bool decay = params_[i].decay < 0 ? p.dim() >= 2 : params_[i].decay > 0;
    if (decay && opts_.weight_decay != 0) p.mul_(1.0 - lr * opts_.weight_decay);
    s.exp_avg.lerp_(g, 1.0 - opts_.beta1);
    s.exp_avg_sq.mul_(opts_.beta2).addcmul_(g, g, 1.0 - opts_.beta2);
    const double bc1 = 1.0 - std::pow(opts_.beta1, static_cast<double>(s.step));
    const double bc2 = 1.0 - std::pow(opts_.beta2, static_cast<double>(s.step));
    at::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(opts_.eps);
    p.addcdiv_(s.exp_avg, denom, -lr / bc1);
    if (s.master.defined()) model_param.copy_(s.master);
  }
}

void AdamW::zero_grad() {
  for (auto& p : params_) {
    at::Tensor g = grad_of(p);
    if (g.defined()) g.zero_();
  }
}

double lr_at(int64_t step, int64_t total_steps, int64_t warmup, double lr, double min_lr) {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t decay = std::max<int64_t>(1, total_steps - warmup);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double grad_norm_squared(const std::vector<NamedParam>& params) {
  // Note [partition-invariant norm]: each element is squared exactly in fp64 (a
  // float's square fits in a double) and the squares are summed in fp64, in chunks
  // small enough to stay in cache. So the norm does not depend, beyond ~1e-16, on
  // how the gradients are split into tensors or shards: ZeRO's shards and DDP's
  // whole tensors give the same clipping factor once it is rounded to the
  // gradients' precision, and the runs stay equal. (A float-accumulated norm per
  // tensor differs by ~1e-7 between splits, which Adam amplifies in parameters
  // with near-zero gradients.) Half gradients cannot overflow it either.
  constexpr int64_t kChunk = int64_t{1} << 16;
  at::Tensor acc;
  for (const auto& p : params) {
    const auto& g = grad_of(p);
    if (!g.defined() || g.numel() == 0) continue;
    if (!acc.defined()) acc = at::zeros({}, g.options().dtype(at::kDouble));
    at::Tensor flat = g.reshape({-1});
    for (int64_t b = 0; b < flat.numel(); b += kChunk) {
      at::Tensor d = flat.narrow(0, b, std::min(kChunk, flat.numel() - b)).to(at::kDouble);
      acc.add_(at::dot(d, d));
    }
  }
  return acc.defined() ? acc.item<double>() : 0.0;
}

}  // namespace strata
