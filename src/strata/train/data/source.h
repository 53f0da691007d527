#pragma once
#include <memory>
#include <string>

#include "strata/core/config.h"
#include "strata/models/flavours.h"
#include "strata/train/data/dataset.h"

namespace strata {

// Everything the trainer needs from [data]: the shape hints for the model and the
// train / eval datasets.
struct DataSource {
  DataShape shape;
  std::shared_ptr<Dataset> train, eval;
  std::string description;
  std::string tokenizer_path;  // text sources
};

// Step 1 (before the model exists): corpus and tokenizer for text sources, image
// shape and classes for Fashion-MNIST.
DataSource open_data_source(const Config& cfg);
// Step 2 (after the model spec is resolved): the datasets, cut to the model's shapes.
void build_datasets(DataSource& src, const Config& cfg, const ModelSpec& spec);

std::string data_cache_dir(const DataConfig& cfg);

}  // namespace strata
