#pragma once
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include <functional>

#include "strata/models/stage.h"

namespace strata {

// One micro-batch. Language models: input/target (B, T) int64 token ids (target -100 =
// ignored); BERT adds token_type (B, T). Image models: input (B, C, H, W) float, target (B).
struct Batch {
  at::Tensor input;
  at::Tensor target;
  at::Tensor token_type;
  int64_t num_samples() const { return input.size(0); }
};

// How a model runs a piece of itself without keeping its activations: called with the
// piece as a function of its inputs, the inputs, the parameters it reads and the
// buffers it may change. parallel/recompute gives memory/recompute's checkpoint
// (Note [activation recompute]); models only say where the pieces are.
using SegmentFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
using SegmentRunner = std::function<at::Tensor(SegmentFn, const std::vector<at::Tensor>& inputs,
                                               const std::vector<at::Tensor>& params,
                                               const std::vector<at::Tensor>& buffers)>;

// Blocks [begin, end) of a part (local indices), run as one piece.
struct BlockSegment {
  int64_t begin = 0, end = 0;
  bool recompute = false;
};

// A unit of the model's block list: parallel wrappers (recompute, ZeRO-3 units,
// pipeline stages) operate on these.
class Block : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // Selective recompute: the attention core runs through runner (null: kept as
  // usual); false when the block has no attention core.
  virtual bool set_selective_recompute(SegmentRunner /*runner*/) { return false; }
};

// Called around each block's forward, inside recomputation too: ZeRO-3 gathers a
// block's parameters before it runs and frees them after (parallel/zero).
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual void pre_forward(int64_t block) = 0;
  virtual at::Tensor post_forward(int64_t block, at::Tensor out) = 0;
};

// Every model is an explicit list of blocks: embed -> block[0..L) -> head (+ loss),
// built as the part one rank runs (Note [model parts]): block(i) is the part's i-th
// block, global block global_block(i).
class Model : public torch::nn::Module {
 public:
  explicit Model(StageInfo stage = {}) : stage_(stage) {}
  virtual at::Tensor embed(const Batch& b) = 0;  // first stage: activations entering the blocks
  virtual at::Tensor head_loss(const at::Tensor& x, const Batch& b) = 0;  // last: mean loss
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  Block& block(int64_t i) { return *blocks_.at(static_cast<size_t>(i)); }
  const StageInfo& stage() const { return stage_; }
  int64_t global_block(int64_t i) const { return stage_.block_begin + i; }

  // The part's forward: the first stage embeds the batch (x is unused), others take
  // the previous stage's activations x; the last returns the loss, others their
  // output activations.
  at::Tensor forward_part(const at::Tensor& x, const Batch& b);
  // The whole model's loss (a part that is the whole model).
  at::Tensor forward_loss(const Batch& b) { return forward_part({}, b); }
  // The part's blocks on x, segment by segment (see Note [activation recompute]).
  at::Tensor run_blocks(at::Tensor x);
  // Which blocks run as one piece and which pieces runner recomputes (parallel/recompute
  // chooses); empty: every block plainly.
  void set_segments(std::vector<BlockSegment> segments, SegmentRunner runner);
  const std::vector<BlockSegment>& segments() const { return segments_; }
  // The tensors one embedding and the head share (a tied embedding), by name, whichever
  // stages hold them; a pipeline sums their gradients between the two ends.
  virtual std::vector<std::string> tied_parameters() const { return {}; }
  // Those this part holds as copies of ones another stage owns (a tied embedding on the
  // last stage): checkpoints save the owner's.
  std::vector<std::string> tied_copies() const {
    return stage_.last && !stage_.first ? tied_parameters() : std::vector<std::string>{};
  }
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
  StageInfo stage_;
  std::vector<BlockSegment> segments_;  // empty: all blocks, nothing recomputed
  SegmentRunner runner_;
  std::vector<BlockHooks*> hooks_;
};

}  // namespace strata
