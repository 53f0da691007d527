#include "strata/models/tied_head.h"

#include <ATen/autocast_mode.h>

#include <torch/csrc/autograd/custom_function.h>
#include <algorithm>

namespace strata {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The weight rides outside autograd's inputs, so the Function has no edge to it.
struct TiedWeight : torch::CustomClassHolder {
  at::Tensor weight;    // the parameter, whose .grad receives the head's part
  at::Tensor computed;  // the weight in the compute dtype (the parameter itself unless cast)
  at::ScalarType input_dtype = at::kFloat;
};

// grad += g2^T x2 a slice of rows at a time, each product made by the fast GEMM of
// its dtype and then added: a whole V x C product would be a V x C temporary, and
// adding a half one into an fp32 grad (autocast) makes TensorIterator widen it into a
// second, fp32 temporary.
void add_product_by_rows(at::Tensor& grad, const at::Tensor& g2, const at::Tensor& x2) {
  constexpr int64_t kRows = 4096;
  const int64_t V = grad.size(0);
  for (int64_t r = 0; r < V; r += kRows) {
    const int64_t n = std::min(kRows, V - r);
    grad.narrow(0, r, n).add_(at::mm(g2.narrow(1, r, n).t(), x2));
  }
}

class TiedHeadFunction : public torch::autograd::Function<TiedHeadFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            c10::intrusive_ptr<TiedWeight> w) {
    const auto device = x.device().type();
    // Autocast would cast both operands of the linear to its dtype; do the same here.
    const at::ScalarType dtype = at::autocast::is_autocast_enabled(device)
                                     ? at::autocast::get_autocast_dtype(device)
                                     : w->weight.scalar_type();
    w->input_dtype = x.scalar_type();
    w->computed = w->weight.scalar_type() == dtype ? w->weight : w->weight.to(dtype);
    at::Tensor xc = x.to(dtype);
    ctx->save_for_backward({xc});
    ctx->saved_data["weight"] = c10::IValue::make_capsule(w);
    return at::matmul(xc, w->computed.t());  // (..., V)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto w = c10::static_intrusive_pointer_cast<TiedWeight>(ctx->saved_data["weight"].toCapsule());
    const at::Tensor xc = ctx->get_saved_variables()[0];
    const at::Tensor& W = w->computed;
    at::Tensor g = grad_out[0].to(W.scalar_type());
    const int64_t V = W.size(0), C = W.size(1);
    at::Tensor g2 = g.reshape({-1, V}), x2 = xc.reshape({-1, C});
    at::Tensor grad_x = at::matmul(g, W).to(w->input_dtype);  // (..., C)
    at::NoGradGuard no_grad;
    at::Tensor& grad = w->weight.mutable_grad();
    // addmm_ accumulates without a V x C temporary, but on the CPU only the fp32 GEMM
    // takes beta = 1 at full speed (half types fall back to a slow loop there).
    if (grad.defined() && grad.scalar_type() == W.scalar_type() &&
        (W.scalar_type() == at::kFloat || W.is_cuda()))
      grad.addmm_(g2.t(), x2);
    else if (grad.defined())
      add_product_by_rows(grad, g2, x2);
    else
      grad = at::mm(g2.t(), x2).to(w->weight.scalar_type());
    w->computed = at::Tensor();
    return {grad_x, at::Tensor()};
  }
};

}  // namespace

at::Tensor tied_head_logits(const at::Tensor& x, const at::Tensor& weight, bool embedding_here) {
  if (!embedding_here) return at::matmul(x, weight.t());
  auto w = c10::make_intrusive<TiedWeight>();
  w->weight = weight;
  return TiedHeadFunction::apply(x, w);
}

}  // namespace strata
