#pragma once
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "strata/memory/recompute.h"

namespace strata {

// One micro-batch. Language models: input/target (B, T) int64 token ids (target -100 =
// ignored); BERT adds token_type (B, T). Image models: input (B, C, H, W) float, target (B).
struct Batch {
  at::Tensor input;
  at::Tensor target;
  at::Tensor token_type;
  int64_t num_samples() const { return input.size(0); }
};

// A unit of the model's block list: parallel wrappers (recompute, ZeRO-3 units,
// pipeline stages) operate on these.
class Block : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // Selective recompute (recompute only the attention core); false when the block
  // has no attention core.
  virtual bool set_selective_recompute(bool /*on*/) { return false; }
};

// Called around each block's forward, inside recomputation too: ZeRO-3 gathers a
// block's parameters before it runs and frees them after (parallel/zero).
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual void pre_forward(int64_t block) = 0;
  virtual at::Tensor post_forward(int64_t block, at::Tensor out) = 0;
};

// Every model is an explicit list of blocks: embed -> block[0..L) -> head (+ loss).
class Model : public torch::nn::Module {
 public:
  virtual at::Tensor embed(const Batch& b) = 0;  // -> activations entering block 0
  virtual at::Tensor head_loss(const at::Tensor& x, const Batch& b) = 0;  // mean loss
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  Block& block(int64_t i) { return *blocks_.at(static_cast<size_t>(i)); }

  at::Tensor forward_loss(const Batch& b) { return head_loss(run_blocks(embed(b)), b); }
  // block[0..L) on x, segment by segment (see Note [activation recompute]).
  at::Tensor run_blocks(at::Tensor x);
  // Chooses what the forward keeps for backward; an Error names a mode the model
  // cannot use (selective without attention, recompute_k out of range).
  void set_recompute(RecomputeMode mode, int64_t k);
  const std::vector<Segment>& segments() const { return segments_; }
  // Hooks around every block's forward: pre_forward in the order added, post_forward
  // in the reverse order (the first added wraps the others).
  void add_block_hooks(BlockHooks* hooks);
  void remove_block_hooks(BlockHooks* hooks);

  // Training FLOPs (forward + backward) per sample, for the MFU estimate.
  virtual double flops_per_sample() const = 0;
  // Tokens per sample for throughput (sequence length; 1 for images).
  virtual int64_t tokens_per_sample() const = 0;
  int64_t num_parameters();

 protected:
  std::vector<std::shared_ptr<Block>> blocks_;

 private:
  at::Tensor run_block(int64_t i, at::Tensor x);
  std::vector<Segment> segments_;  // empty: all blocks, nothing recomputed
  std::vector<BlockHooks*> hooks_;
};

}  // namespace strata
