#include "strata/memory/estimator.h"

#include <algorithm>

#include "strata/core/errors.h"

namespace strata {

namespace {

int64_t linear(int64_t in, int64_t out, bool bias = true) {
  return in * out + (bias ? out : 0);
}
int64_t layer_norm(int64_t d) {
  return 2 * d;
}
// Pre-LN GPT and post-LN BERT blocks hold the same tensors: two layer norms, the
// fused qkv and output projections, and the 4x MLP.
int64_t transformer_block(int64_t d) {
  return 2 * layer_norm(d) + linear(d, 3 * d) + linear(d, d) + linear(d, 4 * d) + linear(4 * d, d);
}
int64_t conv(int64_t in, int64_t out, int64_t k) {
  return in * out * k * k;  // no bias: BatchNorm follows
}
int64_t batch_norm(int64_t c) {
  return 2 * c;  // weight and bias; the running statistics are buffers
}

}  // namespace

ParameterCount count_parameters(const ModelSpec& s) {
  ParameterCount c;
  switch (s.family) {
    case Family::kGpt: {
      const int64_t d = s.d_model;
      c.per_block = transformer_block(d);
      c.outside_blocks = s.vocab_size * d + s.seq_len * d + layer_norm(d) +
                         (s.tied_embedding ? 0 : linear(d, s.vocab_size, /*bias=*/false));
      c.total = c.outside_blocks + s.n_layer * c.per_block;
      c.trainable = c.total;
      break;
    }
    case Family::kBert: {
      const int64_t d = s.d_model;
      c.per_block = transformer_block(d);
      const int64_t pooler = linear(d, d);
      c.outside_blocks = (s.vocab_size + s.seq_len + s.type_vocab) * d + layer_norm(d) + pooler +
                         linear(d, d) + layer_norm(d) + s.vocab_size;
      c.total = c.outside_blocks + s.n_layer * c.per_block;
      c.trainable = c.total - pooler;  // frozen: next-sentence prediction is not trained
      break;
    }
    case Family::kResNet: {
      const bool small_stem = s.image_size < 64;
      c.outside_blocks = conv(s.in_channels, 64, small_stem ? 3 : 7) + batch_norm(64);
      int64_t in = 64;
      c.total = c.outside_blocks;
      for (size_t stage = 0; stage < s.resnet_layers.size(); ++stage) {
        const int64_t w = 64 << stage;
        for (int64_t i = 0; i < s.resnet_layers[stage]; ++i) {
          const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
          const int64_t out = s.bottleneck ? 4 * w : w;
          int64_t b = s.bottleneck ? conv(in, w, 1) + batch_norm(w) + conv(w, w, 3) +
                                         batch_norm(w) + conv(w, out, 1) + batch_norm(out)
                                   : conv(in, w, 3) + batch_norm(w) + conv(w, w, 3) + batch_norm(w);
          if (stride != 1 || in != out) b += conv(in, out, 1) + batch_norm(out);
          c.per_block = std::max(c.per_block, b);
          c.total += b;
          in = out;
        }
      }
      c.outside_blocks += linear(in, s.num_classes);
      c.total += linear(in, s.num_classes);
      c.trainable = c.total;
      break;
    }
    case Family::kMlp: {
      const int64_t h = s.hidden;
      c.per_block = linear(h, h);
      c.outside_blocks =
          linear(s.in_channels * s.image_size * s.image_size, h) + linear(h, s.num_classes);
      c.total = c.outside_blocks + s.n_layer * c.per_block;
      c.trainable = c.total;
      break;
    }
  }
  return c;
}

ModelStateBytes model_state_bytes(int64_t total, int64_t trainable, const StateLayout& l) {
  STRATA_CHECK(l.zero >= 0 && l.zero <= 3, "parallel.zero=", l.zero,
               " is not a ZeRO stage; choose 0 (plain DDP), 1, 2 or 3");
  STRATA_CHECK(l.dp >= 1, "dp=", l.dp, " must be at least 1");
  const auto psi = static_cast<double>(trainable);
  const auto frozen = static_cast<double>(total - trainable);
  const auto n = static_cast<double>(l.dp);
  const auto p = static_cast<double>(l.param_bytes);
  // fp32 moments, and an fp32 master when parameters are half.
  const double opt = 8.0 + (l.master_weights && l.param_bytes < 4 ? 4.0 : 0.0);
  ModelStateBytes b;
  b.parameters = (l.zero >= 3 ? p * psi / n : p * psi) + p * frozen;
  b.gradients = l.zero >= 2 ? p * psi / n : p * psi;
  if (l.zero >= 1 && l.offload) {
    // Strata's offload keeps an fp32 copy and an fp32 gradient buffer of each shard
    // element on the host besides the moments; at stage 3 the host copy is the
    // only copy of the parameters.
    b.host_optimizer = (4.0 + 4.0 + 8.0) * psi / n;
    if (l.zero >= 3) b.parameters = p * frozen;
  } else {
    b.optimizer = l.zero >= 1 ? opt * psi / n : opt * psi;
  }
  return b;
}

double korthikanti_layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a) {
  const auto sd = static_cast<double>(s), hd = static_cast<double>(h);
  return sd * static_cast<double>(b) * hd * (34.0 + 5.0 * static_cast<double>(a) * sd / hd);
}

}  // namespace strata
