#pragma once
#include <torch/nn/module.h>

#include "strata/models/stage.h"

namespace strata {

// Note [vocab parallel]: the token embedding and the tied head split by vocabulary rows
// over the tp ranks (Megatron's VocabParallelEmbedding and vocab-parallel
// cross-entropy). Rank r holds rows [r V/tp, (r+1) V/tp). The embedding looks up the
// ids in its range (others give zeros) and the ranks' results are summed; the head
// gives each rank the logits of its rows only, and the loss is assembled from three
// reductions over tp (the row maximum, the target's logit, the sum of exponentials),
// so the full (tokens x V) logits never exist on one rank. At tp = 1 both are the plain
// operations (the same numbers as torch::nn::Embedding and cross_entropy).
class VocabParallelEmbedding : public torch::nn::Module {
 public:
  // vocab ids, padded to vocab_global rows (Note [vocab padding]).
  VocabParallelEmbedding(int64_t vocab, int64_t vocab_global, int64_t dim, TpContext tp);
  at::Tensor forward(const at::Tensor& ids);
  // This rank's rows of a (vocab, dim) weight drawn at the real vocabulary: padded
  // with zero rows, then sliced.
  at::Tensor slice_rows(const at::Tensor& full) const;
  int64_t vocab_start() const { return tp.rank * (vocab_global / tp.size); }

  at::Tensor weight;
  const int64_t vocab, vocab_global, dim;
  const TpContext tp;
};

// Mean cross-entropy of local logits (N, V/tp) (fp32) against global targets (N)
// (-100 ignored) over the tp group; the plain cross-entropy when regions is null.
// Columns of ids >= vocab (padding) are masked out.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        int64_t vocab_start, int64_t vocab, TpRegions* regions);

}  // namespace strata
