#include "strata/train/optimizer.h"

#include <ATen/ATen.h>

#include <cmath>

namespace strata {

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

void AdamW::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& model_param = params_[i].param;
    at::Tensor g = model_param.grad();
    if (!g.defined()) continue;
    State& s = state_[i];
    at::Tensor p = s.master.defined() ? s.master : model_param;
    if (g.scalar_type() != p.scalar_type()) {
      g = g.to(p.scalar_type());  // a transient fp32 copy of one gradient
      if (grad_scale != 1.0) g.mul_(grad_scale);
    } else if (grad_scale != 1.0) {
      model_param.mutable_grad().mul_(grad_scale);
    }
    s.step += 1;
    if (p.dim() >= 2 && opts_.weight_decay != 0) p.mul_(1.0 - lr * opts_.weight_decay);
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
  for (auto& p : params_)
    if (p.param.grad().defined()) p.param.mutable_grad().zero_();
}

double lr_at(int64_t step, int64_t total_steps, int64_t warmup, double lr, double min_lr) {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t decay = std::max<int64_t>(1, total_steps - warmup);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double grad_norm_squared(const std::vector<NamedParam>& params) {
  double total = 0;
  for (const auto& p : params) {
    const auto& g = p.param.grad();
    if (!g.defined()) continue;
    if (g.scalar_type() == at::kFloat || g.scalar_type() == at::kDouble) {
      // Reduced in the gradient's own dtype (a cascade sum): asking for kDouble would
      // first copy every gradient to double, twice its size.
      const double n = at::linalg_vector_norm(g, 2).item<double>();
      total += n * n;
      continue;
    }
    // Half gradients: on CPU a reduction to fp32 first copies its input to fp32, so
    // go in chunks to keep that copy small.
    constexpr int64_t kChunk = int64_t{1} << 20;
    at::Tensor flat = g.reshape({-1});
    for (int64_t b = 0; b < flat.numel(); b += kChunk) {
      at::Tensor part = flat.narrow(0, b, std::min(kChunk, flat.numel() - b));
      const double n = at::linalg_vector_norm(part, 2, {}, false, at::kFloat).item<double>();
      total += n * n;
    }
  }
  return total;
}

}  // namespace strata
