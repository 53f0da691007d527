#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/state.h"
#include "strata/memory/multi_tensor.h"
#include "strata/optim/optimizer.h"

namespace strata {

struct NamedParam {
  std::string name;
  at::Tensor param;
  // Set by sharded optimizers, whose pieces are flat views: the gradient to use
  // instead of param.grad(), and whether weight decay applies (-1: by the
  // parameter's own rank, dim >= 2).
  at::Tensor grad = {};
  int decay = -1;
  // A tensor-parallel slice: the global shape and where its rows sit (empty: whole).
  std::vector<int64_t> global_shape = {};
  std::vector<SliceRun> runs = {};
  // This rank writes it in checkpoints: each region by exactly one rank (not by other
  // data-parallel replicas, other tp ranks when it is whole on each, or a stage holding a
  // tied copy).
  bool saved = true;
  // Under ZeRO, where every dp rank writes its own shards: this tp rank writes its
  // shards of it (false for a tensor another tp rank writes, being whole on each, or
  // a stage's tied copy).
  bool shard_saved = true;
  // Its squared norm's weight in the global gradient norm: 1/tp for a tensor every tp
  // rank holds whole, so the sum over the tp ranks counts it once.
  double norm_weight = 1;
  // This rank's tensor holds the global tensor's first element (the rank that writes
  // the tensor's one optimizer step count).
  bool holds_first_element() const;
  // The tensor's shape in checkpoints: the global one of a slice, else its own.
  std::vector<int64_t> full_shape() const;
  // Reads this rank's regions of the checkpoint tensor key into t (of param's shape).
  void read_regions(const PieceReader& in, const std::string& key, const at::Tensor& t) const;
};
// The gradient an optimizer reads for p (p.grad when set, else p.param.grad()).
const at::Tensor& grad_of(const NamedParam& p);

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  // Note [multi-tensor AdamW]: -1 (auto) updates CUDA parameters with libtorch's
  // multi-tensor (_foreach) kernels, in chunks of at most kForeachChunkElements, and
  // CPU parameters one tensor at a time; 1 / 0 force either (tests compare the two).
  int foreach = -1;
};

// AdamW (Loshchilov & Hutter), the same arithmetic as torch.optim.AdamW (foreach=False,
// amsgrad=False). Weight decay applies to matrices and embeddings (dim >= 2), not to
// biases and norms. State is made at construction (the caller tags it), so memory
// is accounted from step 0, and exposed by name for checkpoints.
//
// With master_weights, each parameter that is not fp32 gets an fp32 master copy that
// the update is applied to and then copied back (rounded) into the parameter; its
// half gradient is widened to fp32 one tensor at a time (Note [mixed precision]).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<NamedParam> params, AdamWOptions opts, bool master_weights = false);
  void step(double lr, double grad_scale) override { step(lr, grad_scale, 0, SIZE_MAX); }
  void step(double lr) { step(lr, 1.0); }
  std::string describe() const override;
  // Checkpoint pieces (Note [component state]): each parameter this rank writes
  // (NamedParam::saved), whole or as its tensor-parallel regions.
  void save_state(std::vector<TensorPiece>& out) override;
  void load_state(const PieceReader& in) override;

  // One update with learning rate lr on the gradients times grad_scale (loss-scale
  // unscaling and clipping in one factor; fp32 gradients are scaled in place, as
  // clip_grad_norm_ and GradScaler.unscale_ do). Parameters without a gradient are
  // skipped (their step count does not advance, as in PyTorch).
  // Parameters [begin, end) only when given (a sharded optimizer steps a group at a
  // time to overlap communication).
  void step(double lr, double grad_scale, size_t begin, size_t end = SIZE_MAX);
  // Zeroes gradients in place: their memory stays (see Note [gradient buffers]).
  void zero_grad();

  struct State {
    at::Tensor exp_avg, exp_avg_sq;
    at::Tensor master;  // fp32 copy of a half parameter; undefined without one
    int64_t step = 0;
  };
  const std::vector<NamedParam>& params() const { return params_; }
  std::vector<State>& state() { return state_; }

 private:
  bool decays(size_t i) const;
  // One tensor at a time, or chunked multi-tensor kernels (Note [multi-tensor AdamW]).
  void step_one(size_t i, double lr, double grad_scale);
  void step_chunk(const std::vector<size_t>& idx, double lr, double grad_scale);

  std::vector<NamedParam> params_;
  std::vector<State> state_;
  AdamWOptions opts_;
};

// Learning rate at a step: linear warmup from lr/warmup to lr, then cosine decay to
// min_lr at total_steps.
double lr_at(int64_t step, int64_t total_steps, int64_t warmup, double lr, double min_lr);

// Squared global L2 norm of the gradients (reduced by the caller across shards when
// sharded), in fp64 whatever the gradient type, independent of how the gradients
// are split (Note [partition-invariant norm]). Non-finite when any gradient element
// is inf or NaN. Clipping scales them in AdamW::step (its grad_scale).
double grad_norm_squared(const std::vector<NamedParam>& params);
// Zeroes the gradients in place (Note [gradient buffers]: their memory stays).
void zero_grads(const std::vector<NamedParam>& params);

}  // namespace strata
