#include "strata/models/gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include "strata/core/errors.h"
#include "strata/models/init.h"
#include "strata/models/tied_head.h"
#include "strata/models/transformer.h"

namespace strata {

namespace nn = torch::nn;

namespace {
// 0..T-1 for the batch's sequence length, which must fit the learned positions.
at::Tensor position_ids(const Batch& b, int64_t seq_len) {
  const int64_t T = b.input.size(1);
  STRATA_CHECK(T <= seq_len, "sequence of ", T, " tokens exceeds model.seq_len=", seq_len);
  return at::arange(T, b.input.options());
}
}  // namespace

double transformer_flops_per_token(const ModelSpec& s) {
  const double d = static_cast<double>(s.d_model), L = static_cast<double>(s.n_layer);
  const double n = L * 12.0 * d * d + d * static_cast<double>(s.vocab_size);
  return 6.0 * n + 12.0 * L * d * static_cast<double>(s.seq_len);
}

namespace {
BlockShape block_shape(const ModelSpec& spec, TpContext tp) {
  const bool bert = spec.family == Family::kBert;  // Note [GPT and BERT numerics]
  return {spec.d_model, spec.n_head, spec.dropout,           /*causal=*/!bert,
          spec.n_layer, tp,          bert ? "none" : "tanh", bert ? 1e-12 : 1e-5};
}

// Builds unit by unit in the whole model's order (Note [layer init]): a unit this part
// holds is registered under its global name, one it does not is built for its draws
// and dropped.
class PartBuilder {
 public:
  explicit PartBuilder(torch::nn::Module& m) : m_(m) {}
  template <typename T>
  std::shared_ptr<T> unit(bool held, const std::string& name,
                          std::function<std::shared_ptr<T>()> make) {
    auto mod = make();
    if (!held) {
      init_.skipped(*mod);
      return nullptr;
    }
    init_.held(*mod);
    return m_.register_module(name, mod);
  }
  void finish() { init_.run(); }

 private:
  torch::nn::Module& m_;
  LayerInit init_;
};

// A PartBuilder maker of a plain (replicated) n x d embedding.
std::function<std::shared_ptr<nn::EmbeddingImpl>()> embedding(int64_t n, int64_t d) {
  return [n, d] { return nn::Embedding(n, d).ptr(); };
}
}  // namespace

Gpt::Gpt(const ModelSpec& spec, StageInfo stage, TpContext tp)
    : Model(stage), spec_(spec), tp_(tp) {
  const int64_t L = spec.n_layer;
  const bool first = stage.first, last = stage.last;
  const bool tied_here = spec.tied_embedding && last;
  PartBuilder b(*this);
  wte = b.unit<VocabParallelEmbedding>(first || tied_here, "wte", [&] {
    return std::make_shared<VocabParallelEmbedding>(spec.vocab_size, spec.padded_vocab(tp.size),
                                                    spec.d_model, tp);
  });
  auto wpe_ptr = b.unit<nn::EmbeddingImpl>(first, "wpe", embedding(spec.seq_len, spec.d_model));
  if (wpe_ptr) wpe = nn::Embedding(wpe_ptr);
  if (first) drop = register_module("drop", std::make_shared<Dropout>(spec.dropout));
  const BlockShape shape = block_shape(spec, tp);
  for (int64_t i = 0; i < L; ++i) {
    auto blk = b.unit<GptBlock>(stage.holds(i, L), "block" + std::to_string(i),
                                [&] { return std::make_shared<GptBlock>(shape); });
    if (blk) blocks_.push_back(blk);
  }
  if (last) ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({spec.d_model})));
  if (!spec.tied_embedding) {
    lm_head = b.unit<ParallelLinear>(last, "lm_head", [&] {
      return make_linear(spec.d_model, spec.padded_vocab(tp.size), false, LinearKind::kColumn, tp,
                         0.02);
    });
  }
  b.finish();
}

std::vector<std::string> Gpt::tied_parameters() const {
  if (spec_.tied_embedding) return {"wte.weight"};
  return {};
}

at::Tensor Gpt::embed(const Batch& b) {
  // (B, T, C); under sequence parallelism (B, T/tp, C), this rank's positions.
  at::Tensor positions = stream_positions(position_ids(b, spec_.seq_len).unsqueeze(0), tp_);
  at::Tensor pos = at::embedding(tp_.replicated(wpe->weight), positions);
  return stream_dropout(*drop, wte->forward(b.input) + pos, tp_);
}

at::Tensor Gpt::logits(const at::Tensor& x) {
  at::Tensor h = stream_norm(ln_f, x, tp_);
  if (!spec_.tied_embedding) return lm_head->forward(h);  // (B, T, V/tp)
  // Note [tied head gradient]; under tp the replicated input enters the vocab split
  // (the whole sequence gathered under sequence parallelism).
  if (tp_.regions)
    h = tp_.sequence_parallel ? tp_.regions->gather_for_tp(h) : tp_.regions->copy_to(h);
  return tied_head_logits(h, wte->weight, stage().first);  // (B, T, V/tp)
}

at::Tensor Gpt::decode(const at::Tensor& ids, KvCache& cache) {
  STRATA_CHECK(stage().first && stage().last && tp_.size == 1,
               "decoding needs the whole model in one process (a tp=1, pp=1 build)");
  const int64_t B = ids.size(0), T = ids.size(1), past = cache.length;
  STRATA_CHECK(past + T <= spec_.seq_len, "decoding ", T, " tokens after ", past,
               " cached ones exceeds model.seq_len=", spec_.seq_len, "; clear the cache");
  if (cache.layers.empty()) {
    const at::TensorOptions o = wpe->weight.options();
    const int64_t H = spec_.n_head, D = spec_.d_model / spec_.n_head;
    for (size_t i = 0; i < blocks_.size(); ++i)
      cache.layers.push_back(
          {at::empty({B, H, spec_.seq_len, D}, o), at::empty({B, H, spec_.seq_len, D}, o)});
  }
  at::Tensor positions = at::arange(past, past + T, ids.options());
  at::Tensor x = wte->forward(ids) + at::embedding(wpe->weight, positions);
  for (size_t i = 0; i < blocks_.size(); ++i)
    x = static_cast<GptBlock&>(*blocks_[i]).forward_cached(x, cache.layers[i], past);
  cache.length = past + T;
  return logits(x);
}

at::Tensor Gpt::head_loss(const at::Tensor& x, const Batch& b) {
  // fp32 log-softmax over the vocabulary (Note [precision of sensitive ops]).
  at::Tensor l = logits(x).to(at::kFloat);
  const int64_t start = tp_.rank * (spec_.padded_vocab(tp_.size) / tp_.size);
  return vocab_parallel_cross_entropy(l.view({-1, l.size(-1)}), b.target.reshape({-1}), start,
                                      spec_.vocab_size, tp_.regions.get());
}

double Gpt::flops_per_sample() const {
  return transformer_flops_per_token(spec_) * static_cast<double>(spec_.seq_len);
}

Bert::Bert(const ModelSpec& spec, StageInfo stage, TpContext tp)
    : Model(stage), spec_(spec), tp_(tp) {
  const int64_t L = spec.n_layer;
  const bool first = stage.first, last = stage.last;
  PartBuilder b(*this);
  auto ln = [&](const std::string& name) {
    return register_module(name, nn::LayerNorm(nn::LayerNormOptions({spec.d_model}).eps(1e-12)));
  };
  // The MLM decoder is tied to the word embedding: the last stage holds it too.
  word = b.unit<VocabParallelEmbedding>(first || last, "word", [&] {
    return std::make_shared<VocabParallelEmbedding>(spec.vocab_size, spec.padded_vocab(tp.size),
                                                    spec.d_model, tp);
  });
  if (auto p = b.unit<nn::EmbeddingImpl>(first, "pos", embedding(spec.seq_len, spec.d_model)))
    pos = nn::Embedding(p);
  if (auto p = b.unit<nn::EmbeddingImpl>(first, "type", embedding(spec.type_vocab, spec.d_model)))
    type = nn::Embedding(p);
  if (first) {
    ln_emb = ln("ln_emb");
    drop = register_module("drop", std::make_shared<Dropout>(spec.dropout));
  }
  const BlockShape shape = block_shape(spec, tp);
  for (int64_t i = 0; i < L; ++i) {
    auto blk = b.unit<BertBlock>(stage.holds(i, L), "block" + std::to_string(i),
                                 [&] { return std::make_shared<BertBlock>(shape); });
    if (blk) blocks_.push_back(blk);
  }
  // Plain linears; under sequence parallelism mlm_dense sees this rank's positions.
  auto linear = [&] {
    return make_linear(spec.d_model, spec.d_model, true, LinearKind::kPlain, tp, 0.02);
  };
  pooler = b.unit<ParallelLinear>(last, "pooler", linear);
  mlm_dense = b.unit<ParallelLinear>(last, "mlm_dense", linear);
  if (last) {
    mlm_ln = ln("mlm_ln");
    mlm_bias = register_parameter("mlm_bias", at::zeros({spec.padded_vocab(tp.size) / tp.size}));
  }
  b.finish();
  // The pooler serves next-sentence prediction, which masked-LM training omits: it
  // is kept (bert-base has its usual parameter count and checkpoints its usual
  // tensors) but frozen, so no gradient, optimizer state or all-reduce is spent on it.
  if (pooler)
    for (auto& p : pooler->parameters()) p.set_requires_grad(false);
}

std::vector<std::string> Bert::tied_parameters() const {
  return {"word.weight"};
}

at::Tensor Bert::embed(const Batch& b) {
  // Under sequence parallelism everything after the word embedding's reduction holds
  // this rank's positions.
  at::Tensor positions = stream_positions(position_ids(b, spec_.seq_len).unsqueeze(0), tp_);
  at::Tensor types =
      stream_positions(b.token_type.defined() ? b.token_type : at::zeros_like(b.input), tp_);
  at::Tensor e = word->forward(b.input) + at::embedding(tp_.replicated(pos->weight), positions) +
                 at::embedding(tp_.replicated(type->weight), types);
  return stream_dropout(*drop, stream_norm(ln_emb, e, tp_), tp_);
}

at::Tensor Bert::logits(const at::Tensor& x) {
  at::Tensor h = stream_norm(mlm_ln, at::gelu(mlm_dense->forward(x)), tp_);
  if (tp_.regions)
    h = tp_.sequence_parallel ? tp_.regions->gather_for_tp(h) : tp_.regions->copy_to(h);
  at::Tensor z = tied_head_logits(h, word->weight, stage().first);  // (B, T, V/tp)
  return z.add_(mlm_bias.to(z.scalar_type()));
}

at::Tensor Bert::head_loss(const at::Tensor& x, const Batch& b) {
  at::Tensor l = logits(x).to(at::kFloat);
  return vocab_parallel_cross_entropy(l.view({-1, l.size(-1)}), b.target.reshape({-1}),
                                      word->vocab_start(), spec_.vocab_size, tp_.regions.get());
}

double Bert::flops_per_sample() const {
  return transformer_flops_per_token(spec_) * static_cast<double>(spec_.seq_len);
}

}  // namespace strata
