#pragma once
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "strata/models/dropout.h"
#include "strata/models/flavours.h"
#include "strata/models/linear.h"
#include "strata/models/model.h"
#include "strata/models/transformer.h"
#include "strata/models/vocab_parallel.h"

namespace strata {

// GPT-2 decoder: token + learned position embeddings, pre-LN causal blocks, final
// LayerNorm, LM head (tied to the token embedding unless tied_embedding=false).
class Gpt : public Model {
 public:
  explicit Gpt(const ModelSpec& spec, StageInfo stage = {}, TpContext tp = {});
  at::Tensor embed(const Batch& b) override;
  at::Tensor head_loss(const at::Tensor& x, const Batch& b) override;
  at::Tensor logits(const at::Tensor& x);
  // Inference (eval mode, one process): the logits (B, T, V) of new tokens ids (B, T)
  // that follow the cache's, whose keys and values it adds (Note [KV cache]); the
  // cache must leave room for them within seq_len.
  at::Tensor decode(const at::Tensor& ids, KvCache& cache);
  double flops_per_sample() const override;
  int64_t tokens_per_sample() const override { return spec_.seq_len; }

  std::shared_ptr<VocabParallelEmbedding> wte;  // Note [vocab parallel]
  torch::nn::Embedding wpe{nullptr};
  std::shared_ptr<Dropout> drop;
  torch::nn::LayerNorm ln_f{nullptr};
  std::shared_ptr<ParallelLinear> lm_head;  // only when untied
  // wte when the head is tied to it.
  std::vector<std::string> tied_parameters() const override;

 private:
  ModelSpec spec_;
  TpContext tp_;
};

// BERT encoder for masked-LM pre-training: token + position + token-type
// embeddings, LayerNorm, post-LN bidirectional blocks, MLM head (dense, GELU,
// LayerNorm, decoder tied to the word embedding with its own bias), and the
// pooler so the parameter count matches the published model.
class Bert : public Model {
 public:
  explicit Bert(const ModelSpec& spec, StageInfo stage = {}, TpContext tp = {});
  std::vector<std::string> tied_parameters() const override;
  at::Tensor embed(const Batch& b) override;
  at::Tensor head_loss(const at::Tensor& x, const Batch& b) override;
  // The masked-LM logits (B, T, V/tp) of the last block's output x.
  at::Tensor logits(const at::Tensor& x);
  double flops_per_sample() const override;
  int64_t tokens_per_sample() const override { return spec_.seq_len; }

  std::shared_ptr<VocabParallelEmbedding> word;  // Note [vocab parallel]
  torch::nn::Embedding pos{nullptr}, type{nullptr};
  torch::nn::LayerNorm ln_emb{nullptr}, mlm_ln{nullptr};
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ParallelLinear> mlm_dense, pooler;
  at::Tensor mlm_bias;  // this tp rank's rows of the decoder bias

 private:
  ModelSpec spec_;
  TpContext tp_;
};

// Training FLOPs per token of a transformer stack (PaLM appendix B): 6 N + 12 L d T,
// N the non-embedding parameters plus the LM head's d V.
double transformer_flops_per_token(const ModelSpec& s);

}  // namespace strata
