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
  std::vector<HfTensor> out = {{"wte.weight", "transformer.wte.weight", false, true},
                               {"wpe.weight", "transformer.wpe.weight"}};
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    const std::string s = "block" + std::to_string(i) + ".",
                      h = "transformer.h." + std::to_string(i) + ".";
    for (const char* wb : {"weight", "bias"}) {
      const std::string w = wb;
      const bool mat = w == "weight";
      out.push_back({s + "ln1." + w, h + "ln_1." + w});
      out.push_back({s + "attn.qkv." + w, h + "attn.c_attn." + w, mat});
      out.push_back({s + "attn.proj." + w, h + "attn.c_proj." + w, mat});
      out.push_back({s + "ln2." + w, h + "ln_2." + w});
      out.push_back({s + "mlp.fc." + w, h + "mlp.c_fc." + w, mat});
      out.push_back({s + "mlp.proj." + w, h + "mlp.c_proj." + w, mat});
    }
  }
  out.push_back({"ln_f.weight", "transformer.ln_f.weight"});
  out.push_back({"ln_f.bias", "transformer.ln_f.bias"});
  if (!spec.tied_embedding) out.push_back({"lm_head.weight", "lm_head.weight", false, true});
  return out;
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
  const ModelSpec spec = checkpoint_model_spec(
      r, Family::kGpt, "--format hf exports GPT flavours (GPT2LMHeadModel) so far");
  // The header first: every tensor's shape and place, from the checkpoint's index.
  const auto map = gpt2_tensors(spec);
  std::vector<SafeTensorEntry> entries;
  for (const HfTensor& t : map) {
    const std::string key = "model." + t.strata_name;
    STRATA_CHECK(r.has(key), "checkpoint ", dir, " has no tensor ", key,
                 "; is it a checkpoint of a GPT flavour?");
    std::vector<int64_t> shape = r.global_shape(key);
    if (t.vocab_rows) shape[0] = spec.vocab_size;
    if (t.transpose) std::swap(shape[0], shape[1]);
    entries.push_back({t.hf_name, dtype, shape});
  }
  fs::create_directories(a.out);
  SafeTensorsWriter w(a.out + "/model.safetensors", entries, {{"format", "pt"}});
  for (const HfTensor& t : map) {
    const std::string key = "model." + t.strata_name;
    at::Tensor full = at::empty(r.global_shape(key), at::kFloat);
    r.read(key, full);  // assembled from whichever ranks' pieces hold it
    if (t.vocab_rows) full = full.narrow(0, 0, spec.vocab_size);
    if (t.transpose) full = full.t();
    w.write_next(full.to(dtype).contiguous());
  }
  w.commit();
  const std::string dname = dtype == at::kFloat  ? "float32"
                            : dtype == at::kHalf ? "float16"
                                                 : "bfloat16";
  write_file_atomic(a.out + "/config.json", gpt2_config(spec, dname).dump(2) + "\n");
  std::printf("exported %s (step %lld, %zu tensors, %s) to %s as GPT2LMHeadModel\n", dir.c_str(),
              static_cast<long long>(r.meta().value("step", int64_t{0})), map.size(),
              a.dtype.c_str(), a.out.c_str());
  return 0;
}

}  // namespace strata

namespace strata {

bool is_hf_folder(const std::string& dir) {
  return fs::exists(dir + "/config.json") && fs::exists(dir + "/model.safetensors");
}

ModelSpec hf_gpt_spec(const std::string& dir, int64_t vocab_multiple) {
  const std::string path = dir + "/config.json";
  const auto c = nlohmann::json::parse(read_file(path), nullptr, false);
  STRATA_CHECK(c.is_object(), path, " is not JSON; is ", dir, " a Hugging Face model folder?");
  const std::string type = c.value("model_type", "");
  STRATA_CHECK(type == "gpt2", path, " has model_type '", type,
               "'; importing reads GPT-2 (GPT2LMHeadModel) folders so far");
  auto num = [&](const char* key) {
    STRATA_CHECK(c.contains(key) && c[key].is_number_integer(), path, " lacks the integer ", key);
    return c[key].get<int64_t>();
  };
  ModelSpec s;
  s.flavour = "gpt2-124m";
  s.family = Family::kGpt;
  s.n_layer = num("n_layer");
  s.n_head = num("n_head");
  s.d_model = num("n_embd");
  s.seq_len = num("n_positions");
  s.vocab_size = num("vocab_size");
  s.vocab_multiple = vocab_multiple;
  s.tied_embedding = c.value("tie_word_embeddings", true);
  const std::string act = c.value("activation_function", "gelu_new");
  STRATA_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", path, " uses activation '", act,
               "'; Strata's GPT blocks use the tanh GELU (gelu_new)");
  const double eps = c.value("layer_norm_epsilon", 1e-5);
  STRATA_CHECK(std::abs(eps - 1e-5) < 1e-12, path, " has layer_norm_epsilon ", eps,
               "; Strata's GPT uses 1e-5");
  STRATA_CHECK(!c.contains("n_inner") || c["n_inner"].is_null() ||
                   c["n_inner"].get<int64_t>() == 4 * s.d_model,
               path, " has n_inner ", c.value("n_inner", 0), "; Strata's MLP is 4 x n_embd");
  return s;
}

void apply_hf_model(Config& cfg, const std::string& dir) {
  const ModelSpec s = hf_gpt_spec(dir, cfg.model.vocab_multiple);
  cfg.model.flavour = s.flavour;
  cfg.model.n_layer = s.n_layer;
  cfg.model.n_head = s.n_head;
  cfg.model.d_model = s.d_model;
  cfg.model.seq_len = s.seq_len;
  cfg.model.vocab_size = s.vocab_size;
  cfg.model.tied_embedding = s.tied_embedding;
}

HfGptReader::HfGptReader(const std::string& dir, int64_t vocab_multiple)
    : spec_(hf_gpt_spec(dir, vocab_multiple)),
      st_(std::make_unique<SafeTensorsReader>(dir + "/model.safetensors")) {
  for (HfTensor t : gpt2_tensors(spec_)) {
    // Folders saved from the original checkpoints name the body without "transformer.".
    if (!st_->has(t.hf_name) && t.hf_name.rfind("transformer.", 0) == 0)
      t.hf_name = t.hf_name.substr(12);
    STRATA_CHECK(st_->has(t.hf_name), dir, "/model.safetensors has no tensor ", t.hf_name,
                 " that a GPT-2 of its config.json has; is the folder complete?");
    map_.emplace("model." + t.strata_name, t);
  }
}

bool HfGptReader::has(const std::string& name) const {
  return map_.count(name) > 0;
}

std::vector<int64_t> HfGptReader::global_shape(const std::string& name) const {
  const HfTensor& t = map_.at(name);
  std::vector<int64_t> s = st_->entry(t.hf_name).shape;
  if (t.transpose && s.size() == 2) std::swap(s[0], s[1]);
  if (t.vocab_rows) s[0] = spec_.padded_vocab();
  return s;
}

at::Tensor HfGptReader::full(const std::string& name) const {
  const HfTensor& t = map_.at(name);
  at::Tensor x = st_->read(t.hf_name).to(at::kFloat);
  if (t.transpose) x = x.t().contiguous();
  if (t.vocab_rows) {
    STRATA_CHECK(x.size(0) == spec_.vocab_size, t.hf_name, " has ", x.size(0),
                 " rows but config.json's vocab_size is ", spec_.vocab_size);
    at::Tensor padded = at::zeros({spec_.padded_vocab(), x.size(1)}, x.options());
    padded.narrow(0, 0, x.size(0)).copy_(x);
    x = padded;
  }
  return x;
}

void HfGptReader::read(const std::string& name, at::Tensor out,
                       const std::vector<int64_t>& offsets) const {
  at::Tensor x = full(name);
  for (int64_t d = 0; d < out.dim(); ++d)
    x = x.narrow(d, offsets.empty() ? 0 : offsets[static_cast<size_t>(d)], out.size(d));
  out.copy_(x);
}

void HfGptReader::read_flat(const std::string& name, at::Tensor out, int64_t offset) const {
  out.copy_(full(name).reshape({-1}).narrow(0, offset, out.numel()));
}

void HfGptReader::read_box_flat(const std::string& name, at::Tensor out,
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
  HfGptReader in(a.hf_dir, a.vocab_multiple);
  std::vector<TensorPiece> pieces;
  for (const HfTensor& t : gpt2_tensors(in.spec())) {
    TensorPiece p;
    p.name = "model." + t.strata_name;
    p.tensor = in.full(p.name);
    pieces.push_back(std::move(p));
  }
  const std::string tmp = a.out + "/" + checkpoint_dir_name(0) + ".tmp";
  write_shard(tmp, 0, pieces);
  Config cfg;
  cfg.model.vocab_multiple = a.vocab_multiple;
  apply_hf_model(cfg, a.hf_dir);
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
      "imported %s (GPT-2: %lld layers, d_model %lld, vocabulary %lld) to %s; train "
      "from it with --checkpoint.init_from=%s\n",
      a.hf_dir.c_str(), static_cast<long long>(in.spec().n_layer),
      static_cast<long long>(in.spec().d_model), static_cast<long long>(in.spec().vocab_size),
      a.out.c_str(), a.out.c_str());
  return 0;
}

}  // namespace strata
