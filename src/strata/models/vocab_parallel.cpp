#include "strata/models/vocab_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/modules/embedding.h>

#include <algorithm>
#include <limits>

#include "strata/core/errors.h"

namespace strata {

VocabParallelEmbedding::VocabParallelEmbedding(int64_t v, int64_t padded, int64_t d, TpContext t)
    : vocab(v), vocab_global(padded), dim(d), tp(std::move(t)) {
  STRATA_CHECK(vocab_global % tp.size == 0 && vocab_global >= vocab, "a vocabulary of ",
               vocab_global, " rows cannot be split over tp=", tp.size,
               "; choose model.vocab_multiple divisible by tp");
  // torch::nn::Embedding's draw at the real vocabulary (Note [layer init]).
  torch::nn::Embedding full(vocab, d);
  at::NoGradGuard no_grad;
  at::Tensor mine = slice_rows(full->weight);
  weight = register_parameter("weight", mine.is_same(full->weight) ? mine : mine.clone());
}

at::Tensor VocabParallelEmbedding::slice_rows(const at::Tensor& full) const {
  const at::Tensor padded =
      vocab_global == vocab ? full : at::cat({full, at::zeros({vocab_global - vocab, dim})});
  if (tp.size == 1) return padded;
  const int64_t n = vocab_global / tp.size;
  return padded.narrow(0, tp.rank * n, n);
}

at::Tensor VocabParallelEmbedding::forward(const at::Tensor& ids) {
  if (tp.size == 1) return at::embedding(weight, ids);
  const int64_t lo = vocab_start(), n = weight.size(0);
  const at::Tensor outside = (ids < lo).logical_or(ids >= lo + n);
  const at::Tensor local = (ids - lo).masked_fill(outside, 0);
  at::Tensor out = at::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
  // Summed over the ranks; under sequence parallelism each keeps its positions.
  return tp.sequence_parallel ? tp.regions->reduce_scatter_from_tp(out)
                              : tp.regions->reduce_from(out);
}

namespace {

class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& target, int64_t vocab_start, int64_t regions) {
    auto* r = reinterpret_cast<TpRegions*>(regions);
    const int64_t n_local = logits.size(1);
    at::Tensor max = std::get<0>(logits.max(1));  // (N)
    r->all_reduce_max_(max);
    at::Tensor z = logits - max.unsqueeze(1);  // (N, V/tp), <= 0
    const at::Tensor valid = target.ne(-100);
    const at::Tensor mine =
        valid.logical_and(target >= vocab_start).logical_and(target < vocab_start + n_local);
    const at::Tensor local = (target - vocab_start).masked_fill(mine.logical_not(), 0);
    at::Tensor picked =
        z.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(mine.logical_not(), 0);
    r->all_reduce_sum_(picked);
    at::Tensor e = z.exp_();
    at::Tensor sum = e.sum(1);
    r->all_reduce_sum_(sum);
    const at::Tensor count = valid.sum().clamp_min(1).to(at::kFloat);
    at::Tensor loss = ((sum.log() - picked) * valid).sum() / count;
    e.div_(sum.unsqueeze(1));  // the local softmax, kept for backward
    ctx->save_for_backward({e, local, mine, valid, count});
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    auto saved = ctx->get_saved_variables();
    at::Tensor g = saved[0].clone();  // softmax
    const at::Tensor& local = saved[1];
    const at::Tensor& mine = saved[2];
    g.scatter_add_(1, local.unsqueeze(1), -mine.to(g.scalar_type()).unsqueeze(1));
    g.mul_((saved[3].to(g.scalar_type()) * (grad[0] / saved[4])).unsqueeze(1));
    return {g, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& in, const at::Tensor& target,
                                        int64_t vocab_start, int64_t vocab, TpRegions* regions) {
  at::Tensor logits = in;
  const int64_t real = std::clamp<int64_t>(vocab - vocab_start, 0, in.size(1));
  if (real < in.size(1)) {  // padded columns (Note [vocab padding])
    at::Tensor pad = at::arange(in.size(1), in.options().dtype(at::kLong)).ge(real);
    logits = in.masked_fill(pad, -std::numeric_limits<float>::infinity());
  }
  if (!regions)
    return at::cross_entropy_loss(logits, target, {}, at::Reduction::Mean, /*ignore_index=*/-100);
  return VocabParallelCrossEntropy::apply(logits, target, vocab_start,
                                          reinterpret_cast<int64_t>(regions));
}

}  // namespace strata
