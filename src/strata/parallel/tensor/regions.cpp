#include "strata/parallel/tensor/regions.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

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

class CommRegions : public TpRegions {
 public:
  explicit CommRegions(Comm& tp) : tp_(tp) {}
  at::Tensor copy_to(const at::Tensor& x) override {
    return CopyToTp::apply(x, reinterpret_cast<int64_t>(&tp_));
  }
  at::Tensor reduce_from(const at::Tensor& x) override {
    return ReduceFromTp::apply(x, reinterpret_cast<int64_t>(&tp_));
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
