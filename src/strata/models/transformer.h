#pragma once
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "strata/models/dropout.h"
#include "strata/models/linear.h"
#include "strata/models/model.h"

namespace strata {

// The shapes a transformer block is built with: global sizes, the tensor-parallel
// rank it is cut for, and the init of its residual projections (GPT-2's
// 0.02 / sqrt(2 n_layer)).
struct BlockShape {
  int64_t d_model = 0, n_head = 0;
  double dropout = 0;
  bool causal = true;
  int64_t n_layer = 1;
  TpContext tp;
  // Note [GPT and BERT numerics]: GPT-2 uses the tanh GELU and LayerNorm eps 1e-5,
  // BERT the exact (erf) GELU and eps 1e-12, so each loads its published weights.
  const char* gelu = "tanh";  // at::gelu's approximate: "tanh" or "none"
  double norm_eps = 1e-5;
  double proj_std() const;
};

// Under sequence parallelism (TpContext::sequence_parallel) the residual stream holds
// this rank's T/tp positions: its layer norms use replicated weights whose gradients
// are summed over tp, and its dropout masks are keyed on global positions.
at::Tensor stream_norm(torch::nn::LayerNorm& ln, const at::Tensor& x, const TpContext& tp);
at::Tensor stream_dropout(Dropout& drop, const at::Tensor& x, const TpContext& tp);
// This rank's positions of a (B, T) id tensor (the whole of it without SP).
at::Tensor stream_positions(const at::Tensor& ids, const TpContext& tp);

// Note [KV cache]: decoding one token at a time, a causal block's keys and values of
// earlier positions do not change, so each layer keeps them in buffers of the model's
// seq_len positions and a step computes only the new positions' q, k and v. Positions
// are learned absolute ones, so the cache cannot slide: once full, the caller restarts
// it from a shorter context (strata generate keeps the last half of the window).
struct LayerKv {
  at::Tensor k, v;  // (B, H, seq_len, D); the cache's first `length` positions are filled
};
struct KvCache {
  std::vector<LayerKv> layers;
  int64_t length = 0;
  void clear() {
    layers.clear();
    length = 0;
  }
};

// Multi-head self-attention: qkv projection (column-parallel: this rank's heads),
// attention core, output projection (row-parallel).
class SelfAttention : public torch::nn::Module {
 public:
  explicit SelfAttention(const BlockShape& s);
  at::Tensor forward(const at::Tensor& x);  // (B, T, C) -> (B, T, C)
  // The attention core alone (scores, softmax, dropout, x V): selective recompute's unit.
  at::Tensor core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

  // Inference on new positions [kv.length, kv.length + T) of x (B, T, C), attending to
  // the cached ones too; writes the new keys and values into kv (tp=1, no dropout).
  at::Tensor forward_cached(const at::Tensor& x, LayerKv& kv, int64_t past);
  std::shared_ptr<ParallelLinear> qkv, proj;
  SegmentRunner recompute_core;  // selective recompute; null: off

 private:
  int64_t n_head_, n_head_local_, head_offset_;
  double dropout_;
  bool causal_;
};

// Position-wise feed-forward: d -> 4d -> GELU -> d (column- then row-parallel).
class FeedForward : public torch::nn::Module {
 public:
  explicit FeedForward(const BlockShape& s);
  at::Tensor forward(const at::Tensor& x);
  std::shared_ptr<ParallelLinear> fc, proj;

 private:
  std::string gelu_;
};

// GPT-2 block, pre-LayerNorm: x + attn(ln1(x)), then x + mlp(ln2(x)).
class GptBlock : public Block {
 public:
  explicit GptBlock(const BlockShape& s);
  at::Tensor forward(const at::Tensor& x) override;
  // forward in eval mode through the attention's KV cache (Note [KV cache]).
  at::Tensor forward_cached(const at::Tensor& x, LayerKv& kv, int64_t past);
  bool set_selective_recompute(SegmentRunner runner) override {
    attn->recompute_core = std::move(runner);
    return true;
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  std::shared_ptr<SelfAttention> attn;
  std::shared_ptr<FeedForward> mlp;
  std::shared_ptr<Dropout> drop;

 protected:
  TpContext tp_;
};

// BERT block, post-LayerNorm: ln1(x + attn(x)), then ln2(x + mlp(x)).
class BertBlock : public GptBlock {
 public:
  using GptBlock::GptBlock;
  at::Tensor forward(const at::Tensor& x) override;
};

}  // namespace strata
