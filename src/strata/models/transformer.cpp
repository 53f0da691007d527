#include "strata/models/transformer.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/embedding.h>

#include <cmath>
#include <limits>

namespace strata {

namespace nn = torch::nn;

SelfAttention::SelfAttention(int64_t d_model, int64_t n_head, double dropout, bool causal)
    : n_head_(n_head), dropout_(dropout), causal_(causal) {
  qkv = register_module("qkv", nn::Linear(d_model, 3 * d_model));
  proj = register_module("proj", nn::Linear(d_model, d_model));
}

at::Tensor SelfAttention::core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  // (B, H, T, D) each. Without dropout (or on CUDA, where the fused kernels draw
  // Philox masks) the fused kernel runs and never materialises the (T, T) scores.
  const double p = is_training() ? dropout_ : 0.0;
  if (p == 0 || !q.is_cpu()) return at::scaled_dot_product_attention(q, k, v, {}, p, causal_);
  // With dropout on CPU libtorch falls back to its math path anyway; written out
  // here so the probabilities' dropout is the counter-based one (Note
  // [counter-based dropout]), and the scale and causal mask are folded into one
  // baddbmm. Kept for backward: q, k, the softmax output, the dropped
  // probabilities, v.
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const at::Tensor bias =
      causal_ ? at::full({1, T, T}, -std::numeric_limits<double>::infinity(), q.options()).triu(1)
              : at::zeros({1, T, T}, q.options());
  at::Tensor scores = at::baddbmm(bias.expand({B * H, T, T}), q.reshape({B * H, T, D}),
                                  k.reshape({B * H, T, D}).transpose(1, 2), /*beta=*/1.0,
                                  /*alpha=*/1.0 / std::sqrt(static_cast<double>(D)))
                          .view({B, H, T, T});
  return at::matmul(counter_dropout(at::softmax(scores, -1), p, true), v);  // (B, H, T, D)
}

at::Tensor SelfAttention::forward(const at::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head_;
  auto parts = qkv->forward(x).split(C, /*dim=*/2);  // 3 x (B, T, C)
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head_, D}).transpose(1, 2); };
  std::vector<at::Tensor> qkv_heads{heads(parts[0]), heads(parts[1]), heads(parts[2])};
  // (B, H, T, D); selective recompute keeps q, k, v (views of the qkv output, which
  // is kept anyway) and drops what the core saves: the (T, T) scores, softmax and
  // dropout mask on the math path.
  at::Tensor y =
      recompute_core
          ? recompute_checkpoint(
                [this](const std::vector<at::Tensor>& in) { return core(in[0], in[1], in[2]); },
                qkv_heads, {}, {})
          : core(qkv_heads[0], qkv_heads[1], qkv_heads[2]);
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  return proj->forward(y);
}

FeedForward::FeedForward(int64_t d_model) {
  fc = register_module("fc", nn::Linear(d_model, 4 * d_model));
  proj = register_module("proj", nn::Linear(4 * d_model, d_model));
}

at::Tensor FeedForward::forward(const at::Tensor& x) {
  return proj->forward(at::gelu(fc->forward(x), "tanh"));
}

GptBlock::GptBlock(int64_t d_model, int64_t n_head, double dropout, bool causal) {
  ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({d_model})));
  attn = register_module("attn", std::make_shared<SelfAttention>(d_model, n_head, dropout, causal));
  ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({d_model})));
  mlp = register_module("mlp", std::make_shared<FeedForward>(d_model));
  drop = register_module("drop", std::make_shared<Dropout>(dropout));
}

at::Tensor GptBlock::forward(const at::Tensor& x) {
  at::Tensor h = x + drop->forward(attn->forward(ln1->forward(x)));
  return h + drop->forward(mlp->forward(ln2->forward(h)));
}

at::Tensor BertBlock::forward(const at::Tensor& x) {
  at::Tensor h = ln1->forward(x + drop->forward(attn->forward(x)));
  return ln2->forward(h + drop->forward(mlp->forward(h)));
}

void init_transformer_weights(nn::Module& root, int64_t n_layer) {
  torch::NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(n_layer));
  for (auto& item : root.named_modules("", /*include_self=*/false)) {
    auto& m = *item.value();
    if (auto* lin = m.as<nn::Linear>()) {
      bool residual = item.key().size() >= 5 && item.key().substr(item.key().size() - 5) == ".proj";
      nn::init::normal_(lin->weight, 0.0, residual ? proj_std : 0.02);
      if (lin->bias.defined()) nn::init::zeros_(lin->bias);
    } else if (auto* emb = m.as<nn::Embedding>()) {
      nn::init::normal_(emb->weight, 0.0, 0.02);
    }
  }
}

}  // namespace strata
