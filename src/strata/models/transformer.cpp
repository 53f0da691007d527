#include "strata/models/transformer.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/embedding.h>

#include <cmath>
#include <limits>

#include "strata/core/errors.h"

namespace strata {

namespace nn = torch::nn;

double BlockShape::proj_std() const {
  return 0.02 / std::sqrt(2.0 * static_cast<double>(n_layer));
}

at::Tensor stream_norm(nn::LayerNorm& ln, const at::Tensor& x, const TpContext& tp) {
  if (!tp.sequence_parallel) return ln->forward(x);
  const auto& o = ln->options;
  return at::layer_norm(x, o.normalized_shape(), tp.replicated(ln->weight), tp.replicated(ln->bias),
                        o.eps());
}

at::Tensor stream_dropout(Dropout& drop, const at::Tensor& x, const TpContext& tp) {
  if (!tp.sequence_parallel) return drop.forward(x);
  const int64_t t = x.size(1);
  return drop.forward(x, DropoutSlice{1, t * tp.size, tp.rank * t});
}

at::Tensor stream_positions(const at::Tensor& ids, const TpContext& tp) {
  if (!tp.sequence_parallel) return ids;
  const int64_t T = ids.size(1);
  STRATA_CHECK(T % tp.size == 0, "a sequence of ", T, " tokens cannot be split over tp=", tp.size,
               "; choose model.seq_len divisible by tp");
  return ids.narrow(1, tp.rank * (T / tp.size), T / tp.size);
}

SelfAttention::SelfAttention(const BlockShape& s)
    : n_head_(s.n_head),
      n_head_local_(s.n_head / s.tp.size),
      head_offset_(s.tp.rank * (s.n_head / s.tp.size)),
      dropout_(s.dropout),
      causal_(s.causal) {
  STRATA_CHECK(s.n_head % s.tp.size == 0, "n_head=", s.n_head,
               " cannot be split over tp=", s.tp.size, "; choose tp dividing the head count");
  // Note [qkv layout]: the weight is [q; k; v] (GPT-2's layout, kept in checkpoints);
  // a plain column split would give rank 0 all of q and none of v, so it is split as
  // three groups and rank r holds [q_r; k_r; v_r], the rows of its own heads.
  qkv = register_module("qkv", make_linear(s.d_model, 3 * s.d_model, true, LinearKind::kColumn,
                                           s.tp, 0.02, /*groups=*/3));
  proj = register_module(
      "proj", make_linear(s.d_model, s.d_model, true, LinearKind::kRow, s.tp, s.proj_std()));
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
  // This rank's heads of the global (B, H, T, T) probabilities: masks keyed globally.
  const DropoutSlice heads{1, n_head_, head_offset_};
  return at::matmul(counter_dropout(at::softmax(scores, -1), p, true, heads), v);  // (B, H, T, D)
}

at::Tensor SelfAttention::forward(const at::Tensor& x) {
  const int64_t C = x.size(2), D = C / n_head_;
  const int64_t H = n_head_local_, Cl = H * D;  // this rank's heads and width
  // (B, T, 3 Cl): under sequence parallelism x holds T/tp positions, qkv gathers them.
  at::Tensor fused = qkv->forward(x);
  const int64_t B = fused.size(0), T = fused.size(1);
  auto parts = fused.split(Cl, /*dim=*/2);  // 3 x (B, T, Cl)
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  std::vector<at::Tensor> qkv_heads{heads(parts[0]), heads(parts[1]), heads(parts[2])};
  // (B, H, T, D); selective recompute keeps q, k, v (views of the qkv output, which
  // is kept anyway) and drops what the core saves: the (T, T) scores, softmax and
  // dropout mask on the math path.
  at::Tensor y =
      recompute_core
          ? recompute_core(
                [this](const std::vector<at::Tensor>& in) { return core(in[0], in[1], in[2]); },
                qkv_heads, {}, {})
          : core(qkv_heads[0], qkv_heads[1], qkv_heads[2]);
  y = y.transpose(1, 2).contiguous().view({B, T, Cl});
  return proj->forward(y);
}

at::Tensor SelfAttention::forward_cached(const at::Tensor& x, LayerKv& kv, int64_t past) {
  STRATA_CHECK(n_head_local_ == n_head_, "a KV cache decodes at tp=1");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  auto parts = qkv->forward(x).split(C, /*dim=*/2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  kv.k.narrow(2, past, T).copy_(heads(parts[1]));
  kv.v.narrow(2, past, T).copy_(heads(parts[2]));
  const at::Tensor k = kv.k.narrow(2, 0, past + T), v = kv.v.narrow(2, 0, past + T);
  at::Tensor y;
  if (T == 1 || !causal_) {  // one new position sees every cached one
    y = at::scaled_dot_product_attention(heads(parts[0]), k, v);
  } else if (past == 0) {
    y = at::scaled_dot_product_attention(heads(parts[0]), k, v, {}, 0.0, /*is_causal=*/true);
  } else {  // new position i sees cached ones and new ones up to itself: j <= past + i
    const auto opts = at::TensorOptions().dtype(at::kLong).device(x.device());
    const at::Tensor mask =
        at::arange(past + T, opts).unsqueeze(0) <= (at::arange(T, opts) + past).unsqueeze(1);
    y = at::scaled_dot_product_attention(heads(parts[0]), k, v, mask);
  }
  return proj->forward(y.transpose(1, 2).contiguous().view({B, T, C}));
}

FeedForward::FeedForward(const BlockShape& s) : gelu_(s.gelu) {
  fc = register_module(
      "fc", make_linear(s.d_model, 4 * s.d_model, true, LinearKind::kColumn, s.tp, 0.02));
  proj = register_module(
      "proj", make_linear(4 * s.d_model, s.d_model, true, LinearKind::kRow, s.tp, s.proj_std()));
}

at::Tensor FeedForward::forward(const at::Tensor& x) {
  return proj->forward(at::gelu(fc->forward(x), gelu_));
}

GptBlock::GptBlock(const BlockShape& s) : tp_(s.tp) {
  ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({s.d_model}).eps(s.norm_eps)));
  attn = register_module("attn", std::make_shared<SelfAttention>(s));
  ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({s.d_model}).eps(s.norm_eps)));
  mlp = register_module("mlp", std::make_shared<FeedForward>(s));
  drop = register_module("drop", std::make_shared<Dropout>(s.dropout));
}

at::Tensor GptBlock::forward(const at::Tensor& x) {
  at::Tensor h = x + stream_dropout(*drop, attn->forward(stream_norm(ln1, x, tp_)), tp_);
  return h + stream_dropout(*drop, mlp->forward(stream_norm(ln2, h, tp_)), tp_);
}

at::Tensor GptBlock::forward_cached(const at::Tensor& x, LayerKv& kv, int64_t past) {
  at::Tensor h = x + attn->forward_cached(stream_norm(ln1, x, tp_), kv, past);
  return h + mlp->forward(stream_norm(ln2, h, tp_));
}

at::Tensor BertBlock::forward(const at::Tensor& x) {
  at::Tensor h = stream_norm(ln1, x + stream_dropout(*drop, attn->forward(x), tp_), tp_);
  return stream_norm(ln2, h + stream_dropout(*drop, mlp->forward(h), tp_), tp_);
}

}  // namespace strata
