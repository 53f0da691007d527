#include "strata/models/build.h"

#include "strata/core/errors.h"
#include "strata/models/gpt.h"
#include "strata/models/resnet.h"

namespace strata {

std::shared_ptr<Model> build_model(const ModelSpec& spec, StageInfo stage, TpContext tp) {
  if (spec.family == Family::kCustom) {  // Note [user models]
    STRATA_CHECK(spec.build, "model ", spec.flavour, " is a program's own and has no builder");
    auto model = spec.build(stage, tp);
    STRATA_CHECK(model, "the builder of model ", spec.flavour, " returned no model");
    return model;
  }
  if (!is_language_model(spec.family))
    STRATA_CHECK(stage.is_whole(spec.n_layer) && tp.size == 1, spec.flavour,
                 " is built whole: pipeline stages and tensor-parallel slices are cut for ",
                 "the transformer models (gpt, bert); use parallel.tp=1 parallel.pp=1");
  switch (spec.family) {
    case Family::kGpt:
      return std::make_shared<Gpt>(spec, stage, tp);
    case Family::kBert:
      return std::make_shared<Bert>(spec, stage, tp);
    case Family::kResNet:
      return std::make_shared<ResNet>(spec);
    case Family::kMlp:
      return std::make_shared<Mlp>(spec);
    case Family::kCustom:
      break;
  }
  return nullptr;
}

namespace {
std::vector<int64_t> zeros_but(size_t dims, size_t d, int64_t v) {
  std::vector<int64_t> o(dims, 0);
  o[d] = v;
  return o;
}
}  // namespace

std::shared_ptr<Model> build_model_from(const ModelSpec& spec, const PieceReader& in) {
  auto model = build_model(spec);
  at::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) in.read("model." + p.key(), p.value());
  return model;
}

std::unordered_map<const void*, TpGeometry> tp_geometry(Model& part) {
  std::unordered_map<const void*, TpGeometry> out;
  auto rows = [&](const at::Tensor& t, std::vector<int64_t> global, int64_t groups, int64_t rank) {
    // Column split of `groups` row blocks: rank r's rows of each block.
    const int64_t n = t.size(0) / groups, block = global[0] / groups;
    TpGeometry g{global, {}};
    for (int64_t j = 0; j < groups; ++j)
      g.runs.push_back({j * n, n, zeros_but(global.size(), 0, j * block + rank * n)});
    out[t.unsafeGetTensorImpl()] = g;
  };
  for (const auto& mod : part.modules(/*include_self=*/false)) {
    if (auto* lin = mod->as<ParallelLinear>()) {
      if (lin->tp.size == 1 || lin->kind == LinearKind::kPlain) continue;
      if (lin->kind == LinearKind::kColumn) {
        rows(lin->weight, {lin->out_global, lin->in_global}, lin->groups, lin->tp.rank);
        if (lin->bias.defined()) rows(lin->bias, {lin->out_global}, lin->groups, lin->tp.rank);
      } else {
        const int64_t n = lin->in_local();
        out[lin->weight.unsafeGetTensorImpl()] = {{lin->out_global, lin->in_global},
                                                  {{0, lin->out_local(), {0, lin->tp.rank * n}}}};
      }
    } else if (auto* emb = mod->as<VocabParallelEmbedding>()) {
      if (emb->tp.size > 1) rows(emb->weight, {emb->vocab_global, emb->dim}, 1, emb->tp.rank);
    }
  }
  if (auto* bert = dynamic_cast<Bert*>(&part);
      bert && bert->mlm_bias.defined() && bert->word && bert->word->tp.size > 1)
    rows(bert->mlm_bias, {bert->word->vocab_global}, 1, bert->word->tp.rank);
  return out;
}

}  // namespace strata
