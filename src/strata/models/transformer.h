#pragma once
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "strata/models/dropout.h"
#include "strata/models/model.h"

namespace strata {

// Multi-head self-attention: qkv projection, attention core, output projection.
class SelfAttention : public torch::nn::Module {
 public:
  SelfAttention(int64_t d_model, int64_t n_head, double dropout, bool causal);
  at::Tensor forward(const at::Tensor& x);  // (B, T, C) -> (B, T, C)
  // The attention core alone (scores, softmax, dropout, x V): selective recompute's unit.
  at::Tensor core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

  torch::nn::Linear qkv{nullptr}, proj{nullptr};
  bool recompute_core = false;  // selective recompute

 private:
  int64_t n_head_;
  double dropout_;
  bool causal_;
};

// Position-wise feed-forward: d -> 4d -> GELU(tanh) -> d.
class FeedForward : public torch::nn::Module {
 public:
  explicit FeedForward(int64_t d_model);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Linear fc{nullptr}, proj{nullptr};
};

// GPT-2 block, pre-LayerNorm: x + attn(ln1(x)), then x + mlp(ln2(x)).
class GptBlock : public Block {
 public:
  GptBlock(int64_t d_model, int64_t n_head, double dropout, bool causal);
  at::Tensor forward(const at::Tensor& x) override;
  bool set_selective_recompute(bool on) override {
    attn->recompute_core = on;
    return true;
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  std::shared_ptr<SelfAttention> attn;
  std::shared_ptr<FeedForward> mlp;
  std::shared_ptr<Dropout> drop;
};

// BERT block, post-LayerNorm: ln1(x + attn(x)), then ln2(x + mlp(x)).
class BertBlock : public GptBlock {
 public:
  using GptBlock::GptBlock;
  at::Tensor forward(const at::Tensor& x) override;
};

// GPT-2 style normal(0, 0.02) init; residual projections scaled by 1/sqrt(2 L).
void init_transformer_weights(torch::nn::Module& m, int64_t n_layer);

}  // namespace strata
