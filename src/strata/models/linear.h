#pragma once
#include <torch/nn/module.h>

#include <memory>

#include "strata/models/stage.h"

namespace strata {

// Note [parallel linear]: every linear of a transformer comes from make_linear, in one
// of three kinds (Megatron's names):
//  - plain: the whole (out, in) weight;
//  - column: output features split over the tp ranks (rows [r out/tp, (r+1) out/tp) of
//    the weight and of the bias): its input is replicated, its output is this rank's
//    slice of the features (heads, or the MLP's hidden units). A fused projection
//    (attention's [q; k; v]) is `groups` such blocks, each split alone, so rank r
//    keeps [q_r; k_r; v_r]: its own heads of each;
//  - row: input features split (columns of the weight); its output is a partial sum
//    that the tensor-parallel region reduces, and the bias, kept whole, is added once
//    after that reduction (bias_after_reduce).
// The weight is drawn at its full global shape (the draws of torch::nn::Linear, so one
// process sees exactly the weights it always did) and this rank keeps its slice: every
// layout starts from the weights of one process (Note [layer init]).
enum class LinearKind { kPlain, kColumn, kRow };

class ParallelLinear : public torch::nn::Module {
 public:
  // init_std > 0: the layer init draws the weight from normal(0, init_std) and zeroes
  // the bias (Note [layer init]); 0 keeps torch::nn::Linear's default init.
  ParallelLinear(int64_t in_features, int64_t out_features, bool bias, LinearKind kind,
                 TpContext tp, double init_std, int64_t groups = 1);
  at::Tensor forward(const at::Tensor& x);

  // This rank's region of a full (out, in) weight or (out) bias.
  at::Tensor slice_weight(const at::Tensor& full) const;
  at::Tensor slice_bias(const at::Tensor& full) const;
  int64_t in_local() const { return weight.size(1); }
  int64_t out_local() const { return weight.size(0); }

  at::Tensor weight, bias;
  const int64_t in_global, out_global;
  const LinearKind kind;
  const TpContext tp;
  const double init_std;
  const int64_t groups;  // column: consecutive output blocks split separately
  // Zero-bubble schedules: backward may defer the weight gradient (Note [deferred
  // weight gradients]); tp = 1 only.
  bool defer_weight_grad = false;
  // Row-parallel with tp > 1: forward leaves the bias out of its partial sum.
  bool bias_after_reduce() const { return kind == LinearKind::kRow && tp.size > 1; }
};

std::shared_ptr<ParallelLinear> make_linear(int64_t in_features, int64_t out_features, bool bias,
                                            LinearKind kind, TpContext tp, double init_std,
                                            int64_t groups = 1);

}  // namespace strata
