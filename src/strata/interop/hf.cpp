#include "strata/interop/hf.h"

#include <ATen/ATen.h>

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

// A step-N folder as given; a checkpoint root's or a run directory's `latest`.
std::string find_checkpoint(const std::string& path) {
  if (fs::exists(path + "/meta.json")) return path;
  for (const std::string root : {path, path + "/checkpoints"}) {
    const std::string dir = resolve_checkpoint(root, "latest");
    if (!dir.empty()) return dir;
  }
  STRATA_FAIL(path,
              " holds no checkpoint (no meta.json, no latest); give a step-N folder, a "
              "checkpoint.dir or a run directory");
}

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
  const std::string dir = find_checkpoint(a.checkpoint);
  CheckpointReader r(dir);
  STRATA_CHECK(r.meta().contains("model"), "checkpoint ", dir,
               " does not record its model's shape (written before export existed); resume it "
               "and save once with this Strata, then export");
  const ModelSpec spec = spec_from_json(r.meta()["model"]);
  STRATA_CHECK(spec.family == Family::kGpt, "checkpoint ", dir, " holds a ",
               r.meta()["model"].value("family", "?"),
               " model; --format hf exports GPT flavours (GPT2LMHeadModel) so far");
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
