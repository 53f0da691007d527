#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/models/stage.h"

namespace strata {

// kCustom: a model a program that links Strata defines (Note [user models]).
enum class Family { kGpt, kBert, kResNet, kMlp, kCustom };

// A model's resolved shape: the flavour's defaults with [model] overrides applied.
struct ModelSpec {
  std::string flavour;
  Family family = Family::kGpt;
  // transformers
  int64_t n_layer = 0, n_head = 0, d_model = 0, seq_len = 0, vocab_size = 0, type_vocab = 0;
  int64_t vocab_multiple = 1;  // Note [vocab padding]
  double dropout = 0;
  bool tied_embedding = true;
  // The embedding's and head's rows: vocab_size rounded up to a multiple of
  // vocab_multiple and of tp.
  int64_t padded_vocab(int64_t tp = 1) const;
  // images
  std::vector<int64_t> resnet_layers;  // blocks per stage
  bool bottleneck = false;
  int64_t image_size = 0, in_channels = 0, num_classes = 0, hidden = 0;
  // kCustom: the program's builder (n_layer: its blocks, or 0 when it does not say) and
  // one sample's activations between blocks (what pipeline stages send each other).
  ModelBuilder build;
  std::vector<int64_t> activation_shape;
};

// What the data source says about shapes: 0 fields mean "no opinion".
struct DataShape {
  int64_t vocab_size = 0;  // a trained tokenizer's vocabulary
  int64_t image_size = 0;
  int64_t in_channels = 0;
  int64_t num_classes = 0;
};

std::vector<std::string> flavour_names();
// Pure: flavour table + overrides + data shape. Unknown flavours are a one-line error.
ModelSpec resolve_model_spec(const ModelConfig& cfg, const DataShape& data);
bool is_language_model(Family f);

// The model shape as JSON (a checkpoint's meta.json "model": what `strata export` reads),
// and back.
nlohmann::json spec_json(const ModelSpec& spec);
ModelSpec spec_from_json(const nlohmann::json& j);
// Sets the [model] keys that build the shape spec_json describes.
void apply_spec_json(ModelConfig& m, const nlohmann::json& j);

}  // namespace strata
