#include "strata/models/linear.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/linear.h>

#include "strata/core/errors.h"
#include "strata/models/deferred_grad.h"

namespace strata {

ParallelLinear::ParallelLinear(int64_t in_features, int64_t out_features, bool with_bias,
                               LinearKind k, TpContext t, double std, int64_t g)
    : in_global(in_features), out_global(out_features), kind(k), tp(t), init_std(std), groups(g) {
  const int64_t split = kind == LinearKind::kColumn ? out_features / groups : in_features;
  STRATA_CHECK(kind == LinearKind::kPlain || split % tp.size == 0, "a linear of ", in_features,
               " -> ", out_features, " features cannot be split over tp=", tp.size,
               "; choose tp dividing ", split);
  // The full layer's own construction draws (torch::nn::Linear's kaiming-uniform
  // weight and uniform bias), so the random stream is that of the whole model.
  torch::nn::Linear full(torch::nn::LinearOptions(in_features, out_features).bias(with_bias));
  at::NoGradGuard no_grad;
  // A slice gets storage of its own (not a view of the full layer's, which is freed).
  auto own = [&](const at::Tensor& full_t, const at::Tensor& mine) {
    return mine.is_same(full_t) ? full_t : mine.clone(at::MemoryFormat::Contiguous);
  };
  weight = register_parameter("weight", own(full->weight, slice_weight(full->weight)));
  if (with_bias) bias = register_parameter("bias", own(full->bias, slice_bias(full->bias)));
}

namespace {
// Rank r's rows of each of `groups` consecutive row blocks, concatenated.
at::Tensor column_slice(const at::Tensor& full, int64_t groups, TpContext tp) {
  const int64_t block = full.size(0) / groups, n = block / tp.size;
  if (groups == 1) return full.narrow(0, tp.rank * n, n);
  std::vector<at::Tensor> parts;
  for (int64_t g = 0; g < groups; ++g) parts.push_back(full.narrow(0, g * block + tp.rank * n, n));
  return at::cat(parts, 0);
}
}  // namespace

at::Tensor ParallelLinear::slice_weight(const at::Tensor& full) const {
  if (tp.size == 1 || kind == LinearKind::kPlain) return full;
  if (kind == LinearKind::kColumn) return column_slice(full, groups, tp);
  const int64_t n = in_global / tp.size;
  return full.narrow(1, tp.rank * n, n);
}

at::Tensor ParallelLinear::slice_bias(const at::Tensor& full) const {
  if (tp.size == 1 || kind != LinearKind::kColumn) return full;
  return column_slice(full, groups, tp);
}

at::Tensor ParallelLinear::forward(const at::Tensor& x) {
  // torch::nn::Linear's own forward (matmul, then the bias added in place), so the
  // numbers are those of the model before linears were cut: at::linear's fused
  // flatten-and-addmm path rounds differently (~1e-7).
  namespace F = torch::nn::functional;
  if (tp.size == 1)
    return defer_weight_grad ? deferrable_linear(x, weight, bias) : F::linear(x, weight, bias);
  STRATA_ASSERT(tp.regions, "a tensor-parallel linear needs the tp regions");
  const bool sp = tp.sequence_parallel;
  // A plain linear under sequence parallelism sees this rank's positions only.
  if (kind == LinearKind::kPlain) return F::linear(x, tp.replicated(weight), tp.replicated(bias));
  if (kind == LinearKind::kColumn)
    return sp ? tp.regions->gathered_linear(x, weight, bias)
              : F::linear(tp.regions->copy_to(x), weight, bias);
  // Row: this rank's partial sum, reduced (scattered over the sequence under
  // sequence parallelism), then the bias once.
  at::Tensor part = F::linear(x, weight);
  at::Tensor y = sp ? tp.regions->reduce_scatter_from_tp(part) : tp.regions->reduce_from(part);
  return bias.defined() ? y + tp.replicated(bias) : y;
}

std::shared_ptr<ParallelLinear> make_linear(int64_t in_features, int64_t out_features, bool bias,
                                            LinearKind kind, TpContext tp, double init_std,
                                            int64_t groups) {
  return std::make_shared<ParallelLinear>(in_features, out_features, bias, kind, tp, init_std,
                                          groups);
}

}  // namespace strata
