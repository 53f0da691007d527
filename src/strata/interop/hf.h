#pragma once
#include <ATen/core/ScalarType.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/models/flavours.h"

namespace strata {

// Note [Hugging Face names]: how a Strata GPT's tensors are GPT-2's in `transformers`
// (GPT2LMHeadModel). The names differ (block3.attn.qkv -> transformer.h.3.attn.c_attn),
// GPT-2's linears are Conv1D, whose weight is the transpose of a Linear's, the
// embedding holds the real vocabulary (Strata pads it to model.vocab_multiple: the
// padded rows are dropped), and a tied head is no tensor of its own. Pure: tested
// against the model's own parameter list.
struct HfTensor {
  std::string strata_name;  // the model's parameter name (checkpoint piece "model.<name>")
  std::string hf_name;
  bool transpose = false;   // Conv1D weight
  bool vocab_rows = false;  // keep the first vocab_size rows
};
std::vector<HfTensor> gpt2_tensors(const ModelSpec& spec);
// config.json for GPT2LMHeadModel with this shape (dtype: "float32", "bfloat16", ...).
nlohmann::json gpt2_config(const ModelSpec& spec, const std::string& dtype);

// `strata export CHECKPOINT -o DIR --format hf`: model.safetensors + config.json that
// `transformers` loads, read piece by piece from a checkpoint of any layout (one tensor
// in memory at a time). CHECKPOINT: a step-N folder, a checkpoint root (its `latest`) or a
// run directory. Returns the exit status.
struct ExportArgs {
  std::string checkpoint, out, format = "hf", dtype = "fp32";
};
int run_export(const ExportArgs& a);

}  // namespace strata
