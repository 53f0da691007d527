#pragma once
#include <ATen/core/ScalarType.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/core/safetensors.h"
#include "strata/core/state.h"
#include "strata/models/flavours.h"

namespace strata {

// Note [Hugging Face names]: how a Strata GPT's tensors are GPT-2's in `transformers`
// (GPT2LMHeadModel) and a Strata BERT's are BertForMaskedLM's. The names differ
// (block3.attn.qkv -> transformer.h.3.attn.c_attn), GPT-2's linears are Conv1D, whose
// weight is the transpose of a Linear's, BERT keeps query, key and value apart where
// Strata fuses them as [q; k; v] (three row blocks of one tensor), the embedding holds
// the real vocabulary (Strata pads it to model.vocab_multiple: the padded rows are
// dropped), and a tied head is no tensor of its own. BERT's pooler is written too
// (BertForMaskedLM ignores it, the published checkpoints carry it); a folder without
// it imports a zero pooler, which masked-LM training never reads. Pure: tested against
// the model's own parameter list.
struct HfTensor {
  std::string strata_name;  // the model's parameter name (checkpoint piece "model.<name>")
  std::string hf_name;
  bool transpose = false;      // Conv1D weight
  bool vocab_rows = false;     // keep the first vocab_size rows
  int part = 0, parts = 1;     // the part-th of `parts` equal row blocks of the Strata tensor
  bool optional = false;       // a folder may lack it (imported as zeros)
  std::vector<int64_t> shape;  // the Strata tensor's shape (vocabulary rows padded)
};
std::vector<HfTensor> gpt2_tensors(const ModelSpec& spec);
std::vector<HfTensor> bert_tensors(const ModelSpec& spec);
// The table of the spec's family (GPT or BERT); one error line for another family.
std::vector<HfTensor> hf_tensors(const ModelSpec& spec);
// The Hugging Face tensor's shape, from t.shape: fewer rows, one part, transposed.
std::vector<int64_t> hf_shape(const HfTensor& t, const ModelSpec& spec);
// config.json for GPT2LMHeadModel or BertForMaskedLM with this shape (dtype: "float32",
// "bfloat16", ...).
nlohmann::json gpt2_config(const ModelSpec& spec, const std::string& dtype);
nlohmann::json bert_config(const ModelSpec& spec, const std::string& dtype);

// A Hugging Face folder (config.json + model.safetensors).
bool is_hf_folder(const std::string& dir);
// The Strata shape of a GPT-2 or BERT config.json; one error line for what Strata cannot
// represent (another model type, activation or layer-norm epsilon, an MLP other than
// 4 x the width, ...).
ModelSpec hf_spec(const std::string& dir, int64_t vocab_multiple);
// Sets the [model] keys so the run builds the folder's model (a GPT or BERT flavour of
// its shape).
void apply_hf_model(Config& cfg, const std::string& dir);

// The folder's tensors under Strata's checkpoint names ("model.<name>"), in Strata's
// layout (Linear weights, q, k and v fused, vocabulary rows padded with zeros): what
// checkpoint.init_from and `strata import` read, for any layout's regions. Every
// tensor's shape is checked against the config at open.
class HfReader : public PieceReader {
 public:
  HfReader(const std::string& dir, int64_t vocab_multiple);
  const ModelSpec& spec() const { return spec_; }
  bool has(const std::string& name) const override;
  std::vector<int64_t> global_shape(const std::string& name) const override;
  void read(const std::string& name, at::Tensor out,
            const std::vector<int64_t>& offsets = {}) const override;
  void read_flat(const std::string& name, at::Tensor out, int64_t offset) const override;
  void read_box_flat(const std::string& name, at::Tensor out, const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& box_shape, int64_t offset) const override;
  // The whole tensor in Strata's layout.
  at::Tensor full(const std::string& name) const;

 private:
  ModelSpec spec_;
  std::unique_ptr<SafeTensorsReader> st_;
  // "model.<strata name>" -> its HF tensors (parts in order)
  std::map<std::string, std::vector<HfTensor>> map_;
};

// `strata import DIR -o CHECKPOINT_DIR`: a Strata checkpoint (step 0, the weights only)
// of a Hugging Face GPT-2 or BERT folder, for checkpoint.init_from.
struct ImportArgs {
  std::string hf_dir, out;
  int64_t vocab_multiple = 128;
};
int run_import(const ImportArgs& a);

// `strata export CHECKPOINT -o DIR --format hf`: model.safetensors + config.json that
// `transformers` loads, read piece by piece from a checkpoint of any layout (one tensor
// in memory at a time). CHECKPOINT: a step-N folder, a checkpoint root (its `latest`) or a
// run directory. Returns the exit status.
struct ExportArgs {
  std::string checkpoint, out, format = "hf", dtype = "fp32";
};
int run_export(const ExportArgs& a);

}  // namespace strata
