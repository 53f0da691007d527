#include "strata/models/init.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/embedding.h>

#include "strata/models/linear.h"
#include "strata/models/vocab_parallel.h"

namespace strata {

namespace {
constexpr double kEmbeddingStd = 0.02;
}

void LayerInit::held(torch::nn::Module& m) {
  record(m, true);
}

void LayerInit::skipped(torch::nn::Module& m) {
  record(m, false);
}

void LayerInit::record(torch::nn::Module& root, bool keep) {
  for (const auto& mod : root.modules(/*include_self=*/true)) {
    if (auto* lin = mod->as<ParallelLinear>()) {
      if (lin->init_std <= 0) continue;
      Item it{{lin->out_global, lin->in_global}, lin->init_std, {}, {}, {}};
      if (keep) {
        it.target = lin->weight;
        it.slice = [lin](const at::Tensor& full) { return lin->slice_weight(full); };
        it.zero = lin->bias;
      }
      items_.push_back(std::move(it));
    } else if (auto* vp = mod->as<VocabParallelEmbedding>()) {
      // Drawn at the real vocabulary; slice_rows pads (Note [vocab padding]).
      Item it{{vp->vocab, vp->dim}, kEmbeddingStd, {}, {}, {}};
      if (keep) {
        it.target = vp->weight;
        it.slice = [vp](const at::Tensor& full) { return vp->slice_rows(full); };
      }
      items_.push_back(std::move(it));
    } else if (auto* emb = mod->as<torch::nn::Embedding>()) {
      Item it{emb->weight.sizes().vec(), kEmbeddingStd, {}, {}, {}};
      if (keep) {
        it.target = emb->weight;
        it.slice = [](const at::Tensor& full) { return full; };
      }
      items_.push_back(std::move(it));
    }
  }
}

void LayerInit::run() {
  at::NoGradGuard no_grad;
  for (auto& it : items_) {
    // Drawn at the full shape, as the whole model's weight was.
    at::Tensor full = at::empty(it.full_shape, at::kFloat).normal_(0.0, it.std);
    if (it.target.defined()) it.target.copy_(it.slice(full));
    if (it.zero.defined()) it.zero.zero_();
  }
  items_.clear();
}

}  // namespace strata
