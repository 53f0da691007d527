#include "strata/interop/hf.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/core/safetensors.h"
#include "strata/train/checkpoint.h"

namespace fs = std::filesystem;

namespace strata {

std::vector<HfTensor> gpt2_tensors(const ModelSpec& spec) {
  const int64_t d = spec.d_model, V = spec.padded_vocab();
  std::vector<HfTensor> out;
  auto add = [&](std::string s, std::string h, std::vector<int64_t> shape, bool transpose = false,
                 bool vocab_rows = false) {
    HfTensor t;
    t.strata_name = std::move(s), t.hf_name = std::move(h), t.shape = std::move(shape);
    t.transpose = transpose, t.vocab_rows = vocab_rows;
    out.push_back(std::move(t));
  };
  add("wte.weight", "transformer.wte.weight", {V, d}, false, true);
  add("wpe.weight", "transformer.wpe.weight", {spec.seq_len, d});
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    const std::string s = "block" + std::to_string(i) + ".",
                      h = "transformer.h." + std::to_string(i) + ".";
    for (const std::string w : {"weight", "bias"}) {
      const bool mat = w == "weight";
      auto shape = [&](int64_t rows, int64_t cols) {
        return mat ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
      };
      add(s + "ln1." + w, h + "ln_1." + w, {d});
      add(s + "attn.qkv." + w, h + "attn.c_attn." + w, shape(3 * d, d), mat);
      add(s + "attn.proj." + w, h + "attn.c_proj." + w, shape(d, d), mat);
      add(s + "ln2." + w, h + "ln_2." + w, {d});
      add(s + "mlp.fc." + w, h + "mlp.c_fc." + w, shape(4 * d, d), mat);
      add(s + "mlp.proj." + w, h + "mlp.c_proj." + w, shape(d, 4 * d), mat);
    }
  }
  add("ln_f.weight", "transformer.ln_f.weight", {d});
  add("ln_f.bias", "transformer.ln_f.bias", {d});
  if (!spec.tied_embedding) add("lm_head.weight", "lm_head.weight", {V, d}, false, true);
  return out;
}

std::vector<HfTensor> bert_tensors(const ModelSpec& spec) {
  const int64_t d = spec.d_model, V = spec.padded_vocab();
  std::vector<HfTensor> out;
  auto add = [&](std::string s, std::string h, std::vector<int64_t> shape, int part = 0,
                 int parts = 1) {
    HfTensor t;
    t.strata_name = std::move(s), t.hf_name = std::move(h), t.shape = std::move(shape);
    t.part = part, t.parts = parts;
    out.push_back(std::move(t));
  };
  // A Linear's weight and bias, or a LayerNorm's.
  auto linear = [&](const std::string& s, const std::string& h, int64_t rows, int64_t cols) {
    add(s + ".weight", h + ".weight", {rows, cols});
    add(s + ".bias", h + ".bias", {rows});
  };
  auto norm = [&](const std::string& s, const std::string& h) {
    add(s + ".weight", h + ".weight", {d});
    add(s + ".bias", h + ".bias", {d});
  };
  const std::string e = "bert.embeddings.";
  add("word.weight", e + "word_embeddings.weight", {V, d});
  out.back().vocab_rows = true;
  add("pos.weight", e + "position_embeddings.weight", {spec.seq_len, d});
  add("type.weight", e + "token_type_embeddings.weight", {spec.type_vocab, d});
  norm("ln_emb", e + "LayerNorm");
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    const std::string s = "block" + std::to_string(i) + ".",
                      h = "bert.encoder.layer." + std::to_string(i) + ".";
    const char* qkv[] = {"query", "key", "value"};
    for (int p = 0; p < 3; ++p) {
      add(s + "attn.qkv.weight", h + "attention.self." + qkv[p] + ".weight", {3 * d, d}, p, 3);
      add(s + "attn.qkv.bias", h + "attention.self." + qkv[p] + ".bias", {3 * d}, p, 3);
    }
    linear(s + "attn.proj", h + "attention.output.dense", d, d);
    norm(s + "ln1", h + "attention.output.LayerNorm");  // post-LN: after attention
    linear(s + "mlp.fc", h + "intermediate.dense", 4 * d, d);
    linear(s + "mlp.proj", h + "output.dense", d, 4 * d);
    norm(s + "ln2", h + "output.LayerNorm");
  }
  linear("pooler", "bert.pooler.dense", d, d);
  for (size_t k = out.size() - 2; k < out.size(); ++k) out[k].optional = true;
  linear("mlm_dense", "cls.predictions.transform.dense", d, d);
  norm("mlm_ln", "cls.predictions.transform.LayerNorm");
  add("mlm_bias", "cls.predictions.bias", {V});
  out.back().vocab_rows = true;
  return out;
}

std::vector<HfTensor> hf_tensors(const ModelSpec& spec) {
  STRATA_CHECK(spec.family == Family::kGpt || spec.family == Family::kBert, spec.flavour,
               " has no Hugging Face counterpart; --format hf exports GPT and BERT flavours");
  return spec.family == Family::kGpt ? gpt2_tensors(spec) : bert_tensors(spec);
}

std::vector<int64_t> hf_shape(const HfTensor& t, const ModelSpec& spec) {
  std::vector<int64_t> s = t.shape;
  if (t.vocab_rows) s[0] = spec.vocab_size;
  s[0] /= t.parts;
  if (t.transpose) std::swap(s[0], s[1]);
  return s;
}

nlohmann::json gpt2_config(const ModelSpec& s, const std::string& dtype) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", s.vocab_size},
          {"n_positions", s.seq_len},
          {"n_ctx", s.seq_len},
          {"n_embd", s.d_model},
          {"n_layer", s.n_layer},
          {"n_head", s.n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},  // tanh-approximated GELU, as Strata's
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"layer_norm_epsilon", 1e-5},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", s.tied_embedding},
          {"bos_token_id", s.vocab_size - 1},
          {"eos_token_id", s.vocab_size - 1},
          {"torch_dtype", dtype},
          {"exported_by", "strata 0.1.0"}};
}

nlohmann::json bert_config(const ModelSpec& s, const std::string& dtype) {
  return {{"architectures", {"BertForMaskedLM"}},
          {"model_type", "bert"},
          {"vocab_size", s.vocab_size},
          {"hidden_size", s.d_model},
          {"num_hidden_layers", s.n_layer},
          {"num_attention_heads", s.n_head},
          {"intermediate_size", 4 * s.d_model},
          {"hidden_act", "gelu"},  // the exact (erf) GELU: Note [GPT and BERT numerics]
          {"hidden_dropout_prob", 0.0},
          {"attention_probs_dropout_prob", 0.0},
          {"max_position_embeddings", s.seq_len},
          {"type_vocab_size", s.type_vocab},
          {"initializer_range", 0.02},
          {"layer_norm_eps", 1e-12},
          {"position_embedding_type", "absolute"},
          {"pad_token_id", 0},
          {"tie_word_embeddings", true},
          {"torch_dtype", dtype},
          {"exported_by", "strata 0.1.0"}};
}

namespace {

at::ScalarType parse_dtype(const std::string& d) {
  if (d == "fp32") return at::kFloat;
  if (d == "bf16") return at::kBFloat16;
  if (d == "fp16") return at::kHalf;
  STRATA_FAIL("--dtype ", d, " is not one of fp32, bf16, fp16");
}

}  // namespace

int run_export(const ExportArgs& a) {
  STRATA_CHECK(a.format == "hf", "--format ", a.format, " is not supported; use --format hf");
  STRATA_CHECK(!a.out.empty(), "strata export needs -o DIR, the folder to write");
  const at::ScalarType dtype = parse_dtype(a.dtype);
  const std::string dir = locate_checkpoint(a.checkpoint);
  CheckpointReader r(dir);
  const ModelSpec spec = checkpoint_model_spec(r, {Family::kGpt, Family::kBert},
                                               "--format hf exports GPT and BERT flavours");
  const bool gpt = spec.family == Family::kGpt;
  // The header first: every tensor's shape and place, from the checkpoint's index.
  const auto map = hf_tensors(spec);
  std::vector<SafeTensorEntry> entries;
  for (HfTensor t : map) {
    const std::string key = "model." + t.strata_name;
    STRATA_CHECK(r.has(key), "checkpoint ", dir, " has no tensor ", key,
                 "; is it a checkpoint of a ", gpt ? "GPT" : "BERT", " flavour?");
    t.shape = r.global_shape(key);  // its own padding, whatever tp it was trained at
    entries.push_back({t.hf_name, dtype, hf_shape(t, spec)});
  }
  fs::create_directories(a.out);
  SafeTensorsWriter w(a.out + "/model.safetensors", entries, {{"format", "pt"}});
  std::string held;  // the tensor in `full` (BERT's q, k and v are one Strata tensor)
  at::Tensor full;
  for (const HfTensor& t : map) {
    const std::string key = "model." + t.strata_name;
    if (key != held) {
      full = at::empty(r.global_shape(key), at::kFloat);
      r.read(key, full);  // assembled from whichever ranks' pieces hold it
      held = key;
    }
    at::Tensor x = full;
    if (t.vocab_rows) x = x.narrow(0, 0, spec.vocab_size);
    if (t.parts > 1) x = x.narrow(0, t.part * (x.size(0) / t.parts), x.size(0) / t.parts);
    if (t.transpose) x = x.t();
    w.write_next(x.to(dtype).contiguous());
  }
  w.commit();
  const std::string dname = dtype == at::kFloat  ? "float32"
                            : dtype == at::kHalf ? "float16"
                                                 : "bfloat16";
  const nlohmann::json config = gpt ? gpt2_config(spec, dname) : bert_config(spec, dname);
  write_file_atomic(a.out + "/config.json", config.dump(2) + "\n");
  std::printf("exported %s (step %lld, %zu tensors, %s) to %s as %s\n", dir.c_str(),
              static_cast<long long>(r.meta().value("step", int64_t{0})), map.size(),
              a.dtype.c_str(), a.out.c_str(), gpt ? "GPT2LMHeadModel" : "BertForMaskedLM");
  return 0;
}

}  // namespace strata

namespace strata {

bool is_hf_folder(const std::string& dir) {
  return fs::exists(dir + "/config.json") && fs::exists(dir + "/model.safetensors");
}

namespace {

// A config.json's integer and string fields, each missing or mistyped one a clear line.
struct HfConfig {
  std::string path;
  nlohmann::json c;
  int64_t num(const char* key) const {
    STRATA_CHECK(c.contains(key) && c[key].is_number_integer(), path, " lacks the integer ", key);
    return c[key].get<int64_t>();
  }
  void expect_eps(const char* key, double want, const char* model) const {
    const double eps = c.value(key, want);
    STRATA_CHECK(std::abs(eps - want) <= 1e-6 * want, path, " has ", key, " ", eps, "; Strata's ",
                 model, " uses ", want);
  }
};

ModelSpec gpt2_spec(const HfConfig& h) {
  const auto& c = h.c;
  ModelSpec s;
  s.flavour = "gpt2-124m";
  s.family = Family::kGpt;
  s.n_layer = h.num("n_layer");
  s.n_head = h.num("n_head");
  s.d_model = h.num("n_embd");
  s.seq_len = h.num("n_positions");
  s.vocab_size = h.num("vocab_size");
  s.tied_embedding = c.value("tie_word_embeddings", true);
  const std::string act = c.value("activation_function", "gelu_new");
  STRATA_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", h.path, " uses activation '", act,
               "'; Strata's GPT blocks use the tanh GELU (gelu_new)");
  h.expect_eps("layer_norm_epsilon", 1e-5, "GPT");
  STRATA_CHECK(!c.contains("n_inner") || c["n_inner"].is_null() ||
                   c["n_inner"].get<int64_t>() == 4 * s.d_model,
               h.path, " has n_inner ", c.value("n_inner", 0), "; Strata's MLP is 4 x n_embd");
  return s;
}

ModelSpec bert_spec(const HfConfig& h) {
  const auto& c = h.c;
  ModelSpec s;
  s.flavour = "bert-base";
  s.family = Family::kBert;
  s.n_layer = h.num("num_hidden_layers");
  s.n_head = h.num("num_attention_heads");
  s.d_model = h.num("hidden_size");
  s.seq_len = h.num("max_position_embeddings");
  s.vocab_size = h.num("vocab_size");
  s.type_vocab = h.num("type_vocab_size");
  STRATA_CHECK(s.type_vocab == 2, h.path, " has type_vocab_size ", s.type_vocab,
               "; Strata's BERT has 2 token types");
  STRATA_CHECK(h.num("intermediate_size") == 4 * s.d_model, h.path, " has intermediate_size ",
               h.num("intermediate_size"), "; Strata's MLP is 4 x hidden_size");
  const std::string act = c.value("hidden_act", "gelu");
  STRATA_CHECK(act == "gelu", h.path, " uses hidden_act '", act,
               "'; Strata's BERT uses the exact GELU (gelu)");
  h.expect_eps("layer_norm_eps", 1e-12, "BERT");
  const std::string pos = c.value("position_embedding_type", "absolute");
  STRATA_CHECK(pos == "absolute", h.path, " has position_embedding_type '", pos,
               "'; Strata's BERT learns absolute positions");
  STRATA_CHECK(c.value("tie_word_embeddings", true), h.path,
               " unties the decoder from the word embedding; Strata's BERT ties them");
  return s;
}

}  // namespace

ModelSpec hf_spec(const std::string& dir, int64_t vocab_multiple) {
  HfConfig h{dir + "/config.json", {}};
  h.c = nlohmann::json::parse(read_file(h.path), nullptr, false);
  STRATA_CHECK(h.c.is_object(), h.path, " is not JSON; is ", dir, " a Hugging Face model folder?");
  const std::string type = h.c.value("model_type", "");
  STRATA_CHECK(type == "gpt2" || type == "bert", h.path, " has model_type '", type,
               "'; importing reads GPT-2 (GPT2LMHeadModel) and BERT (BertForMaskedLM) folders");
  ModelSpec s = type == "gpt2" ? gpt2_spec(h) : bert_spec(h);
  s.vocab_multiple = vocab_multiple;
  STRATA_CHECK(s.n_head > 0 && s.d_model % s.n_head == 0, h.path, " has ", s.n_head,
               " heads, which do not divide the width ", s.d_model);
  return s;
}

void apply_hf_model(Config& cfg, const std::string& dir) {
  apply_spec_json(cfg.model, spec_json(hf_spec(dir, cfg.model.vocab_multiple)));
}

HfReader::HfReader(const std::string& dir, int64_t vocab_multiple)
    : spec_(hf_spec(dir, vocab_multiple)),
      st_(std::make_unique<SafeTensorsReader>(dir + "/model.safetensors")) {
  for (HfTensor t : hf_tensors(spec_)) {
    // Folders saved from the original checkpoints name the body without "transformer.".
    if (!st_->has(t.hf_name) && t.hf_name.rfind("transformer.", 0) == 0)
      t.hf_name = t.hf_name.substr(12);
    if (!st_->has(t.hf_name) && t.optional) {
      t.hf_name.clear();  // read as zeros
    } else {
      STRATA_CHECK(st_->has(t.hf_name), dir, "/model.safetensors has no tensor ", t.hf_name,
                   " that a model of its config.json has; is the folder complete?");
      const auto want = hf_shape(t, spec_), got = st_->entry(t.hf_name).shape;
      STRATA_CHECK(got == want, dir, "/model.safetensors holds ", t.hf_name, " of shape ",
                   at::IntArrayRef(got), " but its config.json makes it ", at::IntArrayRef(want),
                   "; the folder's config and weights disagree");
    }
    map_["model." + t.strata_name].push_back(std::move(t));
  }
}

bool HfReader::has(const std::string& name) const {
  return map_.count(name) > 0;
}

std::vector<int64_t> HfReader::global_shape(const std::string& name) const {
  return map_.at(name).front().shape;
}

at::Tensor HfReader::full(const std::string& name) const {
  const auto& parts = map_.at(name);
  const HfTensor& t0 = parts.front();
  if (t0.hf_name.empty()) return at::zeros(t0.shape, at::kFloat);
  std::vector<at::Tensor> xs;
  for (const HfTensor& t : parts) {
    at::Tensor x = st_->read(t.hf_name).to(at::kFloat);
    xs.push_back(t.transpose ? x.t() : x);
  }
  at::Tensor x = xs.size() == 1 ? xs[0].contiguous() : at::cat(xs, 0);
  if (t0.vocab_rows) {
    at::Tensor padded = at::zeros(t0.shape, x.options());
    padded.narrow(0, 0, x.size(0)).copy_(x);
    x = padded;
  }
  return x;
}

void HfReader::read(const std::string& name, at::Tensor out,
                    const std::vector<int64_t>& offsets) const {
  at::Tensor x = full(name);
  for (int64_t d = 0; d < out.dim(); ++d)
    x = x.narrow(d, offsets.empty() ? 0 : offsets[static_cast<size_t>(d)], out.size(d));
  out.copy_(x);
}

void HfReader::read_flat(const std::string& name, at::Tensor out, int64_t offset) const {
  out.copy_(full(name).reshape({-1}).narrow(0, offset, out.numel()));
}

void HfReader::read_box_flat(const std::string& name, at::Tensor out,
                             const std::vector<int64_t>& offsets,
                             const std::vector<int64_t>& box_shape, int64_t offset) const {
  at::Tensor x = full(name);
  for (size_t d = 0; d < box_shape.size(); ++d)
    x = x.narrow(static_cast<int64_t>(d), offsets[d], box_shape[d]);
  out.copy_(x.reshape({-1}).narrow(0, offset, out.numel()));
}

int run_import(const ImportArgs& a) {
  STRATA_CHECK(!a.out.empty(), "strata import needs -o CHECKPOINT_DIR, the folder to write");
  STRATA_CHECK(is_hf_folder(a.hf_dir), a.hf_dir,
               " is not a Hugging Face model folder (config.json and model.safetensors)");
  HfReader in(a.hf_dir, a.vocab_multiple);
  std::vector<TensorPiece> pieces;
  for (const HfTensor& t : hf_tensors(in.spec())) {
    if (t.part > 0) continue;  // one piece per Strata tensor
    TensorPiece p;
    p.name = "model." + t.strata_name;
    p.tensor = in.full(p.name);
    pieces.push_back(std::move(p));
  }
  const std::string tmp = a.out + "/" + checkpoint_dir_name(0) + ".tmp";
  write_shard(tmp, 0, pieces);
  Config cfg;  // the folder's shape, from the config.json the reader already checked
  apply_spec_json(cfg.model, spec_json(in.spec()));
  const nlohmann::json meta = {{"format", 2},
                               {"step", 0},
                               {"layout", {{"dp", 1}, {"tp", 1}, {"pp", 1}}},
                               {"zero", 0},
                               {"world_size", 1},
                               {"model", spec_json(in.spec())},
                               {"weights_only", true},
                               {"imported_from", fs::absolute(a.hf_dir).string()},
                               {"config", config_toml(cfg)}};
  finalize_checkpoint(a.out, 0, meta, 1);
  std::printf(
      "imported %s (%s: %lld layers, d_model %lld, vocabulary %lld) to %s; train "
      "from it with --checkpoint.init_from=%s\n",
      a.hf_dir.c_str(), in.spec().family == Family::kGpt ? "GPT-2" : "BERT",
      static_cast<long long>(in.spec().n_layer), static_cast<long long>(in.spec().d_model),
      static_cast<long long>(in.spec().vocab_size), a.out.c_str(), a.out.c_str());
  return 0;
}

}  // namespace strata
