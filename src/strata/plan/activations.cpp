#include "strata/plan/activations.h"

#include "strata/core/errors.h"

#include <algorithm>

namespace strata {

namespace {

// Note [transformer activations]
// One block (pre-LN GPT or post-LN BERT, the same tensors in another order), N =
// micro-batch x sequence tokens, C = d_model, H heads, a = activation bytes:
// - replicated under tensor parallelism: the two layer-norm outputs, the residual
//   sum between attention and MLP, and the block output: 4 NC;
// - split over tp: the fused qkv output 3 NC (q, k, v are views of it), the
//   attention output NC (the projection's input: the fused kernel writes it in
//   (B, T, H, D) order, so the head merge copies nothing), the MLP's fc output
//   4 NC (GELU's input) and GELU output 4 NC (the projection's input): 12 NC;
// - layer-norm statistics (mean, rstd) in fp32: 4 N x 4 bytes;
// - the attention core: without dropout the fused kernel keeps only its
//   log-sum-exp, N H; with dropout on CPU the written-out path keeps the softmax
//   output and the dropped probabilities, 2 B H T^2 (the score product's
//   operands are views of the qkv output).
// Dropout itself keeps nothing (Note [counter-based dropout]).
// Korthikanti et al.'s sbh(34 + 5as/h) assumes 2-byte activations and one-byte
// dropout masks. At a = 2 Strata's block keeps 32 sbh: no masks (counter-based
// dropout regenerates them), and the 5as/h term (scores, softmax, mask) becomes
// the fused kernel's log-sum-exp, or 4as/h (softmax output and dropped
// probabilities, no mask) when dropout forces the written-out path on CPU.
// Backward of a block: GELU's input and output gradients (4 NC each) live
// together once the MLP's saved tensors begin to be freed: 4 NC above the level,
// plus one weight gradient (4 C^2) before AccumulateGrad adds it into .grad.
struct TransformerShape {
  double N, C, H, B, T, V, a, p, t;
  double r;  // bytes of the GPT residual stream: a, or 4 under autocast
  bool sp;
  bool autocast;  // fp32 parameters, half compute: linears keep half copies of their weights
};

double attention_core(const TransformerShape& s, double dropout) {
  return dropout > 0 ? 2 * s.B * s.H * s.T * s.T * s.a / s.t : s.N * s.H * s.a / s.t;
}

BlockActivations transformer_block(const TransformerShape& s, double dropout) {
  BlockActivations b;
  const double nc = s.N * s.C * s.a, nr = s.N * s.C * s.r;
  // Two layer-norm outputs (half under autocast too: CPU autocast runs layer norm
  // in the lower precision) and two residual-stream tensors.
  const double replicated = (2 * nc + 2 * nr) / (s.sp ? s.t : 1.0);
  b.saved = replicated + 12 * nc / s.t + 4 * s.N * 4 + attention_core(s, dropout);
  if (s.autocast) b.saved += 12 * s.C * s.C * s.a / s.t;  // the four weights' half copies
  b.in = b.out = nr / (s.sp ? s.t : 1.0);
  b.weights = (12 * s.C * s.C / s.t + 13 * s.C) * s.p;
  b.weight_grad = 4 * s.C * s.C * s.p / s.t;
  b.backward_extra = 4 * nc / s.t + b.weight_grad;
  // Deferred (Note [deferred weight gradients]): the four linears' inputs (the two
  // layer-norm outputs or, post-LN, the block input and one norm output, gathered in
  // full under sequence parallelism; the attention output and GELU's, split) and output
  // gradients (two of the stream's width, cast to the compute dtype; qkv's and fc's,
  // split): 4 NC + 12 NC / tp at the activation bytes.
  b.deferred = 4 * nc + 12 * nc / s.t;
  if (dropout > 0)  // softmax's input and output gradients, (B, H, T, T) each
    b.backward_extra = std::max(b.backward_extra, 2 * s.B * s.H * s.T * s.T * s.a / s.t);
  return b;
}

ActivationModel transformer(const ModelSpec& spec, const ActivationOptions& o) {
  TransformerShape s{};
  s.B = static_cast<double>(o.micro_batch);
  s.T = static_cast<double>(spec.seq_len);
  s.N = s.B * s.T;
  s.C = static_cast<double>(spec.d_model);
  s.H = static_cast<double>(spec.n_head);
  s.V = static_cast<double>(spec.padded_vocab(o.tp));
  s.a = static_cast<double>(o.act_bytes);
  s.p = static_cast<double>(o.param_bytes);
  s.t = static_cast<double>(o.tp);
  s.sp = o.sequence_parallel;
  s.autocast = o.autocast;
  const bool bert = spec.family == Family::kBert;
  // Under autocast GPT's residual stream stays fp32 (the embedding's output, and
  // each residual sum of an fp32 and a half tensor); BERT's post-LN blocks pass
  // half layer-norm outputs on.
  s.r = o.autocast && !bert ? 4.0 : s.a;
  const double nc = s.N * s.C * s.a, stats = 2 * s.N * 4;
  ActivationModel m;
  // int64 indices: input and target, and BERT's token types.
  m.batch = (bert ? 3 : 2) * s.N * 8;
  // GPT: the token + position sum (dropout's output replaces it when p > 0).
  // BERT: the three-way sum (layer norm's input), its output and statistics.
  m.embed = bert ? (o.autocast ? s.N * s.C * 4 : nc) + nc + stats : s.N * s.C * s.r;
  m.blocks.assign(static_cast<size_t>(spec.n_layer), transformer_block(s, spec.dropout));
  // Note [language-model head]: the final layer norm's output (BERT: the MLM
  // transform's dense and GELU outputs too) and the fp32 log-probabilities, N V x 4
  // (Note [precision of sensitive ops]); the half logits are freed once widened.
  // In backward the loss gradient (N V), the log-softmax input gradient (N V) and
  // the saved log-probabilities are live together: 2 N V x 4 above the loss level.
  // Vocabulary-parallel under tp.
  m.head = (bert ? 3 : 1) * nc + stats + s.N * s.V * 4 / s.t;
  if (o.autocast) m.head += (s.V * s.C + (bert ? s.C * s.C : 0.0)) * s.a / s.t;  // weight copies
  // Under tp the vocab-parallel loss keeps the local softmax instead of the
  // log-probabilities and turns one copy of it into the logits' gradient: N V / tp x 4.
  m.head_backward = (s.t > 1 ? 1 : 2) * s.N * s.V * 4 / s.t;
  // Deferrable head linears: BERT's MLM dense (input and output gradient, NC each); an
  // untied GPT head (the final norm's output, and the logits' gradient).
  m.head_deferred = bert ? 2 * nc : spec.tied_embedding ? 0.0 : nc + s.N * s.V * s.a / s.t;
  // The tied word embedding's gradient from the head, where it cannot be added into
  // an existing .grad (the estimator decides; Note [tied head gradient]).
  if (spec.tied_embedding || bert) m.tied_gradient = s.V * s.C * s.p / s.t;
  m.embed_backward = s.V * s.C * s.p / s.t;
  m.selective_saving = attention_core(s, spec.dropout);
  m.stage_message = s.N * s.C * s.a / (s.sp ? s.t : 1.0);
  if (s.r != s.a) m.sent_copy = m.stage_message;
  return m;
}

// Note [ResNet activations]
// A feature map is B x c x hw^2 x a bytes. Convolutions save their input;
// BatchNorm saves its input (the convolution's output) and per-channel
// statistics; the in-place ReLU after it saves its result, the next
// convolution's input. The residual sum is freed once the final (out-of-place)
// ReLU has made the block output, which that ReLU keeps. So a basic block keeps 4
// maps of its output shape (conv1 out, ReLU, conv2 out, block out), plus the
// shortcut's convolution output when it has one; a bottleneck keeps 6 (two at the
// input resolution) plus the shortcut. In backward a convolution's weight
// gradient is made twice over (oneDNN's result and the copy handed to
// AccumulateGrad), so the block's largest weight counts twice; where the maps
// are larger, about five maps count instead (below).
ActivationModel resnet(const ModelSpec& spec, const ActivationOptions& o) {
  const double a = static_cast<double>(o.act_bytes), p = static_cast<double>(o.param_bytes);
  const double B = static_cast<double>(o.micro_batch);
  auto map = [&](int64_t c, int64_t hw) {
    return B * static_cast<double>(c) * static_cast<double>(hw * hw) * a;
  };
  auto conv_w = [&](int64_t in, int64_t out, int64_t k) {
    return static_cast<double>(in * out * k * k) * p;
  };
  ActivationModel m;
  m.block_keeps_output = true;
  const int64_t img = spec.image_size;
  m.batch = B * static_cast<double>(spec.in_channels * img * img) * 4 + B * 8;
  // A half model casts the fp32 images once; the stem's convolution keeps the copy.
  if (o.act_bytes < 4) m.embed += map(spec.in_channels, img);
  int64_t hw = img;
  if (img < 64) {
    m.embed += 2 * map(64, hw);  // convolution output, BatchNorm + in-place ReLU
  } else {
    hw = (hw + 1) / 2;
    m.embed += 2 * map(64, hw);
    hw = (hw + 1) / 2;
    m.embed += map(64, hw) + B * 64.0 * static_cast<double>(hw * hw) * 8;  // max-pool + indices
  }
  int64_t in = 64;
  for (size_t stage = 0; stage < spec.resnet_layers.size(); ++stage) {
    const int64_t w = 64 << stage;
    for (int64_t i = 0; i < spec.resnet_layers[stage]; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const int64_t o_hw = (hw + stride - 1) / stride;
      const int64_t out = spec.bottleneck ? 4 * w : w;
      const bool shortcut = stride != 1 || in != out;
      BlockActivations b;
      double wmax = 0;
      if (spec.bottleneck) {
        b.saved = 2 * map(w, hw) + 2 * map(w, o_hw) + 2 * map(out, o_hw);
        wmax = std::max({conv_w(in, w, 1), conv_w(w, w, 3), conv_w(w, out, 1)});
        b.weights = conv_w(in, w, 1) + conv_w(w, w, 3) + conv_w(w, out, 1);
      } else {
        b.saved = 4 * map(w, o_hw);
        wmax = std::max(conv_w(in, w, 3), conv_w(w, w, 3));
        b.weights = conv_w(in, w, 3) + conv_w(w, w, 3);
      }
      if (shortcut) {
        b.saved += map(out, o_hw);
        b.weights += conv_w(in, out, 1);
      }
      b.in = map(in, hw);
      b.out = map(out, o_hw);
      // The larger of: the weight gradient twice, or about five feature maps
      // (oneDNN reorders the output gradient, the input and the input gradient
      // into its blocked layout next to the plain tensors autograd holds).
      const double maps = 5 * std::max(map(out, o_hw), spec.bottleneck ? map(w, hw) : 0.0);
      b.backward_extra = std::max(2 * wmax, maps);
      b.weight_grad = 2 * wmax >= maps ? wmax : 0.0;
      m.blocks.push_back(b);
      hw = o_hw;
      in = out;
    }
  }
  // Pooled features (the classifier's input) and fp32 log-probabilities.
  const double classes = static_cast<double>(spec.num_classes);
  m.head = B * static_cast<double>(in) * a + B * classes * 4;
  m.head_backward = 2 * B * classes * 4;
  return m;
}

// MLP: each residual layer keeps its linear output (GELU's input) and the sum;
// the input layer keeps its output and GELU's.
ActivationModel mlp(const ModelSpec& spec, const ActivationOptions& o) {
  const double a = static_cast<double>(o.act_bytes), p = static_cast<double>(o.param_bytes);
  const double B = static_cast<double>(o.micro_batch), h = static_cast<double>(spec.hidden);
  const double features = static_cast<double>(spec.in_channels * spec.image_size * spec.image_size);
  ActivationModel m;
  m.batch = B * features * 4 + B * 8;
  m.embed = 2 * B * h * a + (o.act_bytes < 4 ? B * features * a : 0);
  BlockActivations b;
  b.saved = 2 * B * h * a;
  b.in = b.out = B * h * a;
  b.weights = (h * h + h) * p;
  b.weight_grad = h * h * p;
  b.backward_extra = b.weight_grad + B * h * a;
  m.blocks.assign(static_cast<size_t>(spec.n_layer), b);
  const double classes = static_cast<double>(spec.num_classes);
  m.head = B * classes * 4;
  m.head_backward = 2 * B * classes * 4;
  return m;
}

}  // namespace

ActivationModel activation_model(const ModelSpec& spec, const ActivationOptions& o) {
  switch (spec.family) {
    case Family::kGpt:
    case Family::kBert:
      return transformer(spec, o);
    case Family::kResNet:
      return resnet(spec, o);
    case Family::kMlp:
      return mlp(spec, o);
    case Family::kCustom:
      STRATA_FAIL("the estimator has no activation formulas for ", spec.flavour,
                  ", a program's own model");
  }
  return {};
}

}  // namespace strata
