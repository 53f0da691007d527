#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace strata {

// Note [model parts]: a model is built as the part one rank runs: the global blocks
// [block_begin, block_end), the embedding when it is the first stage, the head and
// loss when it is the last (Megatron's pre_process / post_process), and each linear
// cut for its tensor-parallel rank. Names stay global (block7 is block7 on any
// stage), so checkpoints, hooks and the estimator speak one language.
struct StageInfo {
  int64_t block_begin = 0, block_end = -1;  // global blocks held; end -1: through the last
  bool first = true, last = true;           // holds the embedding / the head and loss

  static StageInfo whole() { return {}; }
  int64_t end(int64_t num_blocks) const { return block_end < 0 ? num_blocks : block_end; }
  bool holds(int64_t block, int64_t num_blocks) const {
    return block >= block_begin && block < end(num_blocks);
  }
  bool is_whole(int64_t num_blocks) const {
    return first && last && block_begin == 0 && end(num_blocks) == num_blocks;
  }
  std::string to_string(int64_t num_blocks) const;
};

// Note [tensor-parallel regions]: the collectives a tensor-parallel model part needs,
// under Megatron's names, as autograd pairs. models/ says where they go;
// parallel/tensor implements them over the mesh's tp group.
class TpRegions {
 public:
  virtual ~TpRegions() = default;
  // Identity forward, all-reduce (sum) of the gradient backward: entering a
  // column-parallel linear with a replicated input.
  virtual at::Tensor copy_to(const at::Tensor& x) = 0;
  // All-reduce (sum) forward, identity backward: leaving a row-parallel linear.
  virtual at::Tensor reduce_from(const at::Tensor& x) = 0;
  // Sequence parallelism (Note [sequence parallel]): x is (B, T, ...) with the
  // sequence on dim 1; a sequence-parallel tensor holds this rank's T/tp positions.
  // All-gather forward, reduce-scatter backward: entering a column-parallel linear
  // (or the vocab-parallel head) from the sequence-parallel residual stream.
  virtual at::Tensor gather_for_tp(const at::Tensor& x) = 0;
  // gather_for_tp(x) then linear(w, b), keeping only this rank's x for backward, which
  // gathers it again (Megatron's sequence-parallel linear): the gathered input of a
  // column-parallel linear would otherwise be kept whole, undoing SP's memory saving.
  virtual at::Tensor gathered_linear(const at::Tensor& x, const at::Tensor& w,
                                     const at::Tensor& b) = 0;
  // Reduce-scatter forward, all-gather backward: leaving a row-parallel linear (or the
  // vocab-parallel embedding) into the sequence-parallel stream.
  virtual at::Tensor reduce_scatter_from_tp(const at::Tensor& x) = 0;
  // Split forward, all-gather backward: a replicated tensor enters the sequence split.
  virtual at::Tensor scatter_to_sequence(const at::Tensor& x) = 0;
  // All-gather forward, split backward: leaving the sequence split into replicated
  // computation whose gradient every rank computes whole.
  virtual at::Tensor gather_from_sequence(const at::Tensor& x) = 0;
  // In place, outside autograd (vocab-parallel cross-entropy's statistics).
  virtual void all_reduce_max_(at::Tensor& x) = 0;
  virtual void all_reduce_sum_(at::Tensor& x) = 0;
};

// The tensor-parallel rank a part is cut for (Note [parallel linear]); regions is set
// when size > 1.
struct TpContext {
  int64_t rank = 0, size = 1;
  std::shared_ptr<TpRegions> regions;
  bool sequence_parallel = false;  // only with size > 1
  // A parameter every tp rank holds whole but, under sequence parallelism, applies to
  // its own positions only (layer norms, row-parallel biases, position embeddings):
  // used through copy_to, its gradient is summed over the ranks' positions.
  at::Tensor replicated(const at::Tensor& p) const {
    return sequence_parallel && p.defined() ? regions->copy_to(p) : p;
  }
};

class Model;
// Builds the part of a model one rank runs: its pipeline stage, its linears cut for its
// tensor-parallel rank (Note [model parts]).
using ModelBuilder = std::function<std::shared_ptr<Model>(const StageInfo&, const TpContext&)>;

}  // namespace strata
