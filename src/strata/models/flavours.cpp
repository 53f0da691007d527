#include "strata/models/flavours.h"

#include <algorithm>
#include <numeric>

#include "strata/core/errors.h"

namespace strata {

namespace {
struct Flavour {
  const char* name;
  Family family;
  int64_t n_layer, n_head, d_model, seq_len, vocab;
};
// GPT-2 sizes from Radford et al. 2019; BERT-base from Devlin et al. 2019.
constexpr Flavour kTransformers[] = {
    {"debug", Family::kGpt, 4, 4, 96, 128, 8192},
    {"gpt2-124m", Family::kGpt, 12, 12, 768, 1024, 50257},
    {"gpt2-350m", Family::kGpt, 24, 16, 1024, 1024, 50257},
    {"gpt2-1.5b", Family::kGpt, 48, 25, 1600, 1024, 50257},
    {"bert-debug", Family::kBert, 2, 4, 96, 128, 8192},
    {"bert-base", Family::kBert, 12, 12, 768, 512, 30522},
};
}  // namespace

std::vector<std::string> flavour_names() {
  std::vector<std::string> out;
  for (const auto& f : kTransformers) out.push_back(f.name);
  out.insert(out.end(), {"resnet-18", "resnet-50", "mlp"});
  return out;
}

// Note [vocab padding]: the rows of the embedding and head are the vocabulary rounded
// up to a multiple of model.vocab_multiple (128 by default, Megatron's
// make-vocab-size-divisible-by) and of tp, so every tp rank holds the same number of
// rows. The padded rows are zero, no id looks them up, and their logits are masked
// to -inf before the loss, so they never win and never get probability mass or
// gradient. A tp dividing vocab_multiple (1, 2, 4, ... 128 by default) gives the same
// shape at every tp, so checkpoints move between those layouts.
int64_t ModelSpec::padded_vocab(int64_t tp) const {
  const int64_t m = std::lcm(std::max<int64_t>(1, vocab_multiple), std::max<int64_t>(1, tp));
  return (vocab_size + m - 1) / m * m;
}

bool is_language_model(Family f) {
  return f == Family::kGpt || f == Family::kBert;
}

ModelSpec resolve_model_spec(const ModelConfig& cfg, const DataShape& data) {
  ModelSpec s;
  s.flavour = cfg.flavour;
  auto pick = [](int64_t over, int64_t def) { return over > 0 ? over : def; };
  for (const auto& f : kTransformers) {
    if (cfg.flavour != f.name) continue;
    s.family = f.family;
    s.n_layer = pick(cfg.n_layer, f.n_layer);
    s.n_head = pick(cfg.n_head, f.n_head);
    s.d_model = pick(cfg.d_model, f.d_model);
    s.seq_len = pick(cfg.seq_len, f.seq_len);
    s.vocab_size = pick(cfg.vocab_size, pick(data.vocab_size, f.vocab));
    STRATA_CHECK(data.vocab_size <= s.vocab_size, "the data's tokenizer has ", data.vocab_size,
                 " tokens but the model's vocabulary is ", s.vocab_size,
                 " (model.vocab_size or an imported model); use a model with at least that "
                 "many or data.source=synthetic");
    s.vocab_multiple = cfg.vocab_multiple;
    s.type_vocab = f.family == Family::kBert ? 2 : 0;
    s.dropout = cfg.dropout;
    s.tied_embedding = cfg.tied_embedding;
    STRATA_CHECK(s.d_model % s.n_head == 0, "model.d_model=", s.d_model,
                 " is not divisible by n_head=", s.n_head,
                 "; choose d_model as a multiple of n_head");
    return s;
  }
  if (cfg.flavour == "resnet-18" || cfg.flavour == "resnet-50" || cfg.flavour == "mlp") {
    s.family = cfg.flavour == "mlp" ? Family::kMlp : Family::kResNet;
    s.bottleneck = cfg.flavour == "resnet-50";
    s.resnet_layers =
        s.bottleneck ? std::vector<int64_t>{3, 4, 6, 3} : std::vector<int64_t>{2, 2, 2, 2};
    int64_t def_image = s.family == Family::kMlp ? 28 : 224;
    s.image_size = pick(data.image_size, def_image);
    s.in_channels = pick(data.in_channels, s.family == Family::kMlp ? 1 : 3);
    s.num_classes = pick(cfg.num_classes, pick(data.num_classes, 1000));
    s.n_layer = pick(cfg.n_layer, 2);  // mlp hidden layers
    s.hidden = pick(cfg.hidden, 256);
    return s;
  }
  auto names = flavour_names();
  std::string all, hint = closest_name(cfg.flavour, names);
  for (auto& n : names) all += (all.empty() ? "" : ", ") + n;
  STRATA_FAIL("unknown model flavour '", cfg.flavour, "'",
              hint.empty() ? "" : "; did you mean '" + hint + "'?", " (choose from ", all, ")");
}

nlohmann::json spec_json(const ModelSpec& s) {
  return {{"flavour", s.flavour},
          {"family", s.family == Family::kGpt      ? "gpt"
                     : s.family == Family::kBert   ? "bert"
                     : s.family == Family::kCustom ? "custom"
                                                   : "other"},
          {"n_layer", s.n_layer},
          {"n_head", s.n_head},
          {"d_model", s.d_model},
          {"seq_len", s.seq_len},
          {"vocab_size", s.vocab_size},
          {"vocab_multiple", s.vocab_multiple},
          {"type_vocab", s.type_vocab},
          {"tied_embedding", s.tied_embedding}};
}

void apply_spec_json(ModelConfig& m, const nlohmann::json& j) {
  const ModelSpec s = spec_from_json(j);
  if (!s.flavour.empty()) m.flavour = s.flavour;
  m.n_layer = s.n_layer;
  m.n_head = s.n_head;
  m.d_model = s.d_model;
  m.seq_len = s.seq_len;
  m.vocab_size = s.vocab_size;
  m.vocab_multiple = s.vocab_multiple;
  m.tied_embedding = s.tied_embedding;
}

ModelSpec spec_from_json(const nlohmann::json& j) {
  ModelSpec s;
  s.flavour = j.value("flavour", "");
  const std::string f = j.value("family", "");
  s.family = f == "gpt"      ? Family::kGpt
             : f == "bert"   ? Family::kBert
             : f == "custom" ? Family::kCustom
                             : Family::kMlp;
  s.n_layer = j.value("n_layer", int64_t{0});
  s.n_head = j.value("n_head", int64_t{0});
  s.d_model = j.value("d_model", int64_t{0});
  s.seq_len = j.value("seq_len", int64_t{0});
  s.vocab_size = j.value("vocab_size", int64_t{0});
  s.vocab_multiple = j.value("vocab_multiple", int64_t{1});
  s.type_vocab = j.value("type_vocab", int64_t{0});
  s.tied_embedding = j.value("tied_embedding", true);
  return s;
}

}  // namespace strata
