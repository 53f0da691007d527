#include "strata/models/gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include "strata/core/errors.h"
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

Gpt::Gpt(const ModelSpec& spec) : spec_(spec) {
  wte = register_module("wte", nn::Embedding(spec.vocab_size, spec.d_model));
  wpe = register_module("wpe", nn::Embedding(spec.seq_len, spec.d_model));
  drop = register_module("drop", std::make_shared<Dropout>(spec.dropout));
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    blocks_.push_back(register_module(
        "block" + std::to_string(i),
        std::make_shared<GptBlock>(spec.d_model, spec.n_head, spec.dropout, /*causal=*/true)));
  }
  ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({spec.d_model})));
  if (!spec.tied_embedding) {
    lm_head = register_module(
        "lm_head", nn::Linear(nn::LinearOptions(spec.d_model, spec.vocab_size).bias(false)));
  }
  init_transformer_weights(*this, spec.n_layer);
}

at::Tensor Gpt::embed(const Batch& b) {
  at::Tensor positions = position_ids(b, spec_.seq_len);
  return drop->forward(wte->forward(b.input) + wpe->forward(positions));  // (B, T, C)
}

at::Tensor Gpt::logits(const at::Tensor& x) {
  at::Tensor h = ln_f->forward(x);
  return spec_.tied_embedding ? tied_head_logits(h, wte->weight)  // Note [tied head gradient]
                              : lm_head->forward(h);              // (B, T, V)
}

at::Tensor Gpt::head_loss(const at::Tensor& x, const Batch& b) {
  // fp32 log-softmax over the vocabulary (Note [precision of sensitive ops]).
  at::Tensor l = logits(x).to(at::kFloat);
  return at::cross_entropy_loss(l.view({-1, l.size(-1)}), b.target.reshape({-1}), {},
                                at::Reduction::Mean, /*ignore_index=*/-100);
}

double Gpt::flops_per_sample() const {
  return transformer_flops_per_token(spec_) * static_cast<double>(spec_.seq_len);
}

Bert::Bert(const ModelSpec& spec) : spec_(spec) {
  word = register_module("word", nn::Embedding(spec.vocab_size, spec.d_model));
  pos = register_module("pos", nn::Embedding(spec.seq_len, spec.d_model));
  type = register_module("type", nn::Embedding(spec.type_vocab, spec.d_model));
  ln_emb =
      register_module("ln_emb", nn::LayerNorm(nn::LayerNormOptions({spec.d_model}).eps(1e-12)));
  drop = register_module("drop", std::make_shared<Dropout>(spec.dropout));
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    blocks_.push_back(register_module(
        "block" + std::to_string(i),
        std::make_shared<BertBlock>(spec.d_model, spec.n_head, spec.dropout, /*causal=*/false)));
  }
  pooler = register_module("pooler", nn::Linear(spec.d_model, spec.d_model));
  mlm_dense = register_module("mlm_dense", nn::Linear(spec.d_model, spec.d_model));
  mlm_ln =
      register_module("mlm_ln", nn::LayerNorm(nn::LayerNormOptions({spec.d_model}).eps(1e-12)));
  mlm_bias = register_parameter("mlm_bias", at::zeros({spec.vocab_size}));
  init_transformer_weights(*this, spec.n_layer);
  // The pooler serves next-sentence prediction, which masked-LM training omits: it
  // is kept (bert-base has its usual parameter count and checkpoints its usual
  // tensors) but frozen, so no gradient, optimizer state or all-reduce is spent on it.
  for (auto& p : pooler->parameters()) p.set_requires_grad(false);
}

at::Tensor Bert::embed(const Batch& b) {
  at::Tensor positions = position_ids(b, spec_.seq_len);
  at::Tensor types = b.token_type.defined() ? b.token_type : at::zeros_like(b.input);
  return drop->forward(
      ln_emb->forward(word->forward(b.input) + pos->forward(positions) + type->forward(types)));
}

at::Tensor Bert::head_loss(const at::Tensor& x, const Batch& b) {
  at::Tensor h = mlm_ln->forward(at::gelu(mlm_dense->forward(x)));
  at::Tensor z = tied_head_logits(h, word->weight);  // (B, T, V)
  at::Tensor l = (z + mlm_bias.to(z.scalar_type())).to(at::kFloat);
  return at::cross_entropy_loss(l.view({-1, l.size(-1)}), b.target.reshape({-1}), {},
                                at::Reduction::Mean, -100);
}

double Bert::flops_per_sample() const {
  return transformer_flops_per_token(spec_) * static_cast<double>(spec_.seq_len);
}

}  // namespace strata
