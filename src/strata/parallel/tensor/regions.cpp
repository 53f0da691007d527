#include "strata/parallel/tensor/regions.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/linear.h>

#include "strata/core/errors.h"

namespace strata {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor all_reduced(Comm& comm, const at::Tensor& x) {
  at::Tensor y = x.contiguous().clone();
  comm.all_reduce(y).wait();
  return y;
}

Comm& comm_of(AutogradContext* ctx) {
  return *reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
}

// Identity forward; the gradient is summed over the tp ranks (each computed the
// gradient of its own slice of what follows).
class CopyToTp : public torch::autograd::Function<CopyToTp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduced(comm_of(ctx), g[0]), at::Tensor()};
  }
};

// The partial sums of the tp ranks summed forward; the gradient passes unchanged.
class ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    return all_reduced(*reinterpret_cast<Comm*>(comm), x);
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], at::Tensor()}; }
};

// Note [sequence parallel]: the residual stream (B, T, C) is split on the sequence,
// rank r holding positions [r T/tp, (r+1) T/tp). Gloo and NCCL gather and scatter
// the flat dim 0, so the sequence chunks travel as (tp, B, T/tp, ...) and are moved
// into place (no copy when B = 1).
at::Tensor all_gather_sequence(Comm& comm, const at::Tensor& x) {
  // The backends want the chunks on dim 0 of matching rank: (tp B, T/tp, ...).
  at::Tensor in = x.contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  const int64_t B = shape[0];
  shape[0] *= comm.size();
  at::Tensor out = at::empty(shape, in.options());
  comm.all_gather(out, in).wait();
  shape[0] = B;
  std::vector<int64_t> chunks = shape;
  chunks.insert(chunks.begin(), comm.size());  // (tp, B, T/tp, ...)
  shape[1] *= comm.size();
  return out.view(chunks).movedim(0, 1).reshape(shape);
}

at::Tensor reduce_scatter_sequence(Comm& comm, const at::Tensor& x) {
  const int64_t n = comm.size(), T = x.size(1);
  STRATA_CHECK(T % n == 0, "a sequence of ", T, " positions cannot be split over tp=", n,
               "; choose model.seq_len divisible by tp");
  std::vector<int64_t> split = x.sizes().vec();
  split[1] = T / n;
  split.insert(split.begin() + 1, n);  // (B, tp, T/tp, ...)
  at::Tensor in = x.reshape(split).movedim(1, 0).contiguous();
  split.erase(split.begin() + 1);
  at::Tensor out = at::empty(split, x.options());
  split[0] *= n;
  in = in.view(split);  // (tp B, T/tp, ...)
  comm.reduce_scatter(out, in).wait();
  return out;
}

at::Tensor split_sequence(Comm& comm, const at::Tensor& x) {
  const int64_t n = comm.size(), T = x.size(1);
  STRATA_CHECK(T % n == 0, "a sequence of ", T, " positions cannot be split over tp=", n,
               "; choose model.seq_len divisible by tp");
  return x.narrow(1, comm.rank() * (T / n), T / n).contiguous();
}

// All-gather forward; each rank's gradient of the whole sequence is partial (its
// slice of what follows), so backward sums them and keeps this rank's positions.
class GatherForTp : public torch::autograd::Function<GatherForTp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return all_gather_sequence(*reinterpret_cast<Comm*>(comm), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {reduce_scatter_sequence(comm_of(ctx), g[0]), at::Tensor()};
  }
};

// Forward as F::linear of the gathered input; backward gathers x again for the weight
// gradient and reduce-scatters the input gradient. Under autocast the forward's
// matmul ran in the autocast dtype; backward computes in the gradient's dtype and
// returns each gradient in its input's.
class GatheredLinear : public torch::autograd::Function<GatheredLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, int64_t comm) {
    // b is empty for a linear without bias (autograd functions take defined tensors).
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["bias"] = b.numel() > 0;
    ctx->save_for_backward({x, w});
    return torch::nn::functional::linear(all_gather_sequence(*reinterpret_cast<Comm*>(comm), x), w,
                                         b.numel() > 0 ? b : at::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const at::Tensor g = grad[0].contiguous();
    const auto dt = g.scalar_type();
    const int64_t out = g.size(-1), in = w.size(1);
    at::Tensor total = all_gather_sequence(comm_of(ctx), x.to(dt));
    at::Tensor g2 = g.view({-1, out});
    at::Tensor grad_w = g2.t().mm(total.reshape({-1, in})).to(w.scalar_type());
    at::Tensor grad_x =
        reduce_scatter_sequence(comm_of(ctx), g.matmul(w.to(dt))).to(x.scalar_type());
    at::Tensor grad_b;
    if (ctx->saved_data["bias"].toBool()) grad_b = g2.sum(0).to(w.scalar_type());
    return {grad_x, grad_w, grad_b, at::Tensor()};
  }
};

class ReduceScatterFromTp : public torch::autograd::Function<ReduceScatterFromTp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return reduce_scatter_sequence(*reinterpret_cast<Comm*>(comm), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_gather_sequence(comm_of(ctx), g[0]), at::Tensor()};
  }
};

class ScatterToSequence : public torch::autograd::Function<ScatterToSequence> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return split_sequence(*reinterpret_cast<Comm*>(comm), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_gather_sequence(comm_of(ctx), g[0]), at::Tensor()};
  }
};

class GatherFromSequence : public torch::autograd::Function<GatherFromSequence> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return all_gather_sequence(*reinterpret_cast<Comm*>(comm), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {split_sequence(comm_of(ctx), g[0]), at::Tensor()};
  }
};

class CommRegions : public TpRegions {
 public:
  explicit CommRegions(Comm& tp) : tp_(tp) {}
  at::Tensor copy_to(const at::Tensor& x) override {
    return CopyToTp::apply(x, reinterpret_cast<int64_t>(&tp_));
  }
  at::Tensor reduce_from(const at::Tensor& x) override {
    return ReduceFromTp::apply(x, reinterpret_cast<int64_t>(&tp_));
  }
  at::Tensor gather_for_tp(const at::Tensor& x) override {
    return GatherForTp::apply(x, reinterpret_cast<int64_t>(&tp_));
  }
  at::Tensor gathered_linear(const at::Tensor& x, const at::Tensor& w,
                             const at::Tensor& b) override {
    return GatheredLinear::apply(x, w, b.defined() ? b : at::empty({0}, w.options()),
                                 reinterpret_cast<int64_t>(&tp_));
  }
  at::Tensor reduce_scatter_from_tp(const at::Tensor& x) override {
    return ReduceScatterFromTp::apply(x, reinterpret_cast<int64_t>(&tp_));
  }
  at::Tensor scatter_to_sequence(const at::Tensor& x) override {
    return ScatterToSequence::apply(x, reinterpret_cast<int64_t>(&tp_));
  }
  at::Tensor gather_from_sequence(const at::Tensor& x) override {
    return GatherFromSequence::apply(x, reinterpret_cast<int64_t>(&tp_));
  }
  void all_reduce_max_(at::Tensor& x) override { tp_.all_reduce(x, c10d::ReduceOp::MAX).wait(); }
  void all_reduce_sum_(at::Tensor& x) override { tp_.all_reduce(x).wait(); }

 private:
  Comm& tp_;
};

}  // namespace

std::shared_ptr<TpRegions> make_tp_regions(Comm& tp) {
  return std::make_shared<CommRegions>(tp);
}

}  // namespace strata
