#include "strata/optim/adamw.h"

#include <ATen/ATen.h>

#include <algorithm>
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

bool AdamW::decays(size_t i) const {
  const at::Tensor& p = state_[i].master.defined() ? state_[i].master : params_[i].param;
  return params_[i].decay < 0 ? p.dim() >= 2 : params_[i].decay > 0;
}

void AdamW::step(double lr, double grad_scale, size_t begin, size_t end) {
  at::NoGradGuard no_grad;
  end = std::min(end, params_.size());
  std::vector<size_t> chunk;
  int64_t chunk_elements = 0;
  auto flush = [&] {
    if (!chunk.empty()) step_chunk(chunk, lr, grad_scale);
    chunk.clear();
    chunk_elements = 0;
  };
  for (size_t i = begin; i < end; ++i) {
    if (!grad_of(params_[i]).defined()) continue;
    const bool multi = opts_.foreach < 0 ? params_[i].param.is_cuda() : opts_.foreach > 0;
    if (!multi) {
      step_one(i, lr, grad_scale);
      continue;
    }
    // A chunk shares the step count (bias corrections), weight decay, dtypes and device.
    if (!chunk.empty()) {
      const size_t j = chunk.front();
      const bool same = state_[j].step == state_[i].step && decays(j) == decays(i) &&
                        state_[j].master.defined() == state_[i].master.defined() &&
                        params_[j].param.scalar_type() == params_[i].param.scalar_type() &&
                        grad_of(params_[j]).scalar_type() == grad_of(params_[i]).scalar_type() &&
                        params_[j].param.device() == params_[i].param.device();
      if (!same || chunk_elements + params_[i].param.numel() > kForeachChunkElements) flush();
    }
    chunk.push_back(i);
    chunk_elements += params_[i].param.numel();
  }
  flush();
}

void AdamW::step_one(size_t i, double lr, double grad_scale) {
  const at::Tensor& model_param = params_[i].param;
  at::Tensor g = grad_of(params_[i]);
  State& s = state_[i];
  at::Tensor p = s.master.defined() ? s.master : model_param;
  // A half gradient is widened to a transient fp32 copy of this one tensor; an
  // fp32 gradient is scaled in place (as clip_grad_norm_ and GradScaler do).
  if (g.scalar_type() != p.scalar_type()) g = g.to(p.scalar_type());
  if (grad_scale != 1.0) g.mul_(grad_scale);
  s.step += 1;
  if (decays(i) && opts_.weight_decay != 0) p.mul_(1.0 - lr * opts_.weight_decay);
  s.exp_avg.lerp_(g, 1.0 - opts_.beta1);
  s.exp_avg_sq.mul_(opts_.beta2).addcmul_(g, g, 1.0 - opts_.beta2);
  const double bc1 = 1.0 - std::pow(opts_.beta1, static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(opts_.beta2, static_cast<double>(s.step));
  at::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(opts_.eps);
  p.addcdiv_(s.exp_avg, denom, -lr / bc1);
  if (s.master.defined()) model_param.copy_(s.master);
}

// The same arithmetic as step_one, element for element, with one kernel launch per
// operation for the whole chunk instead of one per tensor: on a GPU the per-tensor
// loop is ~10 launches for each of a model's ~150 tensors, milliseconds per step.
void AdamW::step_chunk(const std::vector<size_t>& idx, double lr, double grad_scale) {
  std::vector<at::Tensor> ps, gs, m, v, models;
  for (size_t i : idx) {
    State& s = state_[i];
    at::Tensor p = s.master.defined() ? s.master : params_[i].param;
    at::Tensor g = grad_of(params_[i]);
    if (g.scalar_type() != p.scalar_type()) g = g.to(p.scalar_type());
    ps.push_back(p);
    gs.push_back(g);
    m.push_back(s.exp_avg);
    v.push_back(s.exp_avg_sq);
    if (s.master.defined()) models.push_back(params_[i].param);
    s.step += 1;
  }
  const auto step = static_cast<double>(state_[idx.front()].step);
  if (grad_scale != 1.0) at::_foreach_mul_(gs, grad_scale);
  if (decays(idx.front()) && opts_.weight_decay != 0)
    at::_foreach_mul_(ps, 1.0 - lr * opts_.weight_decay);
  at::_foreach_lerp_(m, gs, 1.0 - opts_.beta1);
  at::_foreach_mul_(v, opts_.beta2);
  at::_foreach_addcmul_(v, gs, gs, 1.0 - opts_.beta2);
  const double bc1 = 1.0 - std::pow(opts_.beta1, step);
  const double bc2 = 1.0 - std::pow(opts_.beta2, step);
  std::vector<at::Tensor> denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, std::sqrt(bc2));
  at::_foreach_add_(denom, opts_.eps);
  at::_foreach_addcdiv_(ps, m, denom, -lr / bc1);
  if (!models.empty()) {
    std::vector<at::Tensor> masters;
    for (size_t i : idx) masters.push_back(state_[i].master);
    at::_foreach_copy_(models, masters);
  }
}

void AdamW::zero_grad() {
  zero_grads(params_);
}

void zero_grads(const std::vector<NamedParam>& params) {
  at::NoGradGuard no_grad;
  for (const auto& p : params) {
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

bool NamedParam::holds_first_element() const {
  return runs.empty() ||
         (runs[0].local_begin == 0 && std::all_of(runs[0].offsets.begin(), runs[0].offsets.end(),
                                                  [](int64_t o) { return o == 0; }));
}

std::vector<int64_t> NamedParam::full_shape() const {
  return runs.empty() ? param.sizes().vec() : global_shape;
}

void NamedParam::read_regions(const PieceReader& in, const std::string& key,
                              const at::Tensor& t) const {
  if (runs.empty()) return in.read(key, t);
  for (const SliceRun& r : runs) in.read(key, t.narrow(0, r.local_begin, r.length), r.offsets);
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
  // Chunks of 64K elements stay in a CPU core's cache; on a GPU, where each chunk is
  // two kernel launches, 16M-element chunks (128 MiB of fp64) keep them few.
  at::Tensor acc;
  for (const auto& p : params) {
    const auto& g = grad_of(p);
    if (!g.defined() || g.numel() == 0) continue;
    const int64_t kChunk = g.is_cuda() ? kForeachChunkElements : int64_t{1} << 16;
    if (!acc.defined()) acc = at::zeros({}, g.options().dtype(at::kDouble));
    at::Tensor flat = g.reshape({-1});
    for (int64_t b = 0; b < flat.numel(); b += kChunk) {
      at::Tensor d = flat.narrow(0, b, std::min(kChunk, flat.numel() - b)).to(at::kDouble);
      if (p.norm_weight == 1)
        acc.add_(at::dot(d, d));
      else
        acc.add_(at::dot(d, d), p.norm_weight);
    }
  }
  return acc.defined() ? acc.item<double>() : 0.0;
}

std::string AdamW::describe() const {
  int64_t masters = 0;
  for (const auto& st : state_) masters += st.master.defined() ? 1 : 0;
  return c10::str("AdamW over ", params_.size(), " tensors",
                  masters ? c10::str(", ", masters, " fp32 masters") : std::string());
}

void AdamW::save_state(std::vector<TensorPiece>& out) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const NamedParam& p = params_[i];
    if (!p.saved) continue;
    // The fp32 master when there is one: a checkpoint keeps full precision.
    const at::Tensor& w = state_[i].master.defined() ? state_[i].master : p.param;
    auto regions = [&](const std::string& name, const at::Tensor& t) {
      if (p.runs.empty()) {
        out.push_back({name, t, {}, {}});
        return;
      }
      for (const auto& r : p.runs)
        out.push_back({name, t.narrow(0, r.local_begin, r.length), p.global_shape, r.offsets});
    };
    regions("model." + p.name, w);
    regions("optim." + p.name + ".exp_avg", state_[i].exp_avg);
    regions("optim." + p.name + ".exp_avg_sq", state_[i].exp_avg_sq);
    // One step count per tensor: from the slice holding its first element.
    if (p.holds_first_element())
      out.push_back(
          {"optim." + p.name + ".step", at::full({1}, state_[i].step, at::kLong), {}, {}});
  }
}

void AdamW::load_state(const PieceReader& in) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const NamedParam& p = params_[i];
    const auto& name = p.name;
    in.expect_shape("model." + name, p.full_shape());
    // This rank's regions of the global tensor, wherever they were written.
    auto read = [&](const std::string& key, const at::Tensor& t) { p.read_regions(in, key, t); };
    State& st = state_[i];
    if (st.master.defined()) {
      read("model." + name, st.master);
      p.param.copy_(st.master);
    } else {
      read("model." + name, p.param);
    }
    read("optim." + name + ".exp_avg", st.exp_avg);
    read("optim." + name + ".exp_avg_sq", st.exp_avg_sq);
    at::Tensor s = at::zeros({1}, at::kLong);
    in.read("optim." + name + ".step", s);
    st.step = s.item<int64_t>();
  }
}

}  // namespace strata
