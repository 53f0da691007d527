#include "strata/train/data/source.h"

#include <filesystem>

#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/train/data/images.h"
#include "strata/train/data/text.h"
#include "strata/train/data/token_files.h"
#include "strata/train/data/tokenizer.h"

namespace strata {

namespace {
constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kSyntheticSize = 1 << 20;
}  // namespace

std::string data_cache_dir(const DataConfig& cfg) {
  return cfg.cache_dir.empty() ? cache_dir() + "/data" : cfg.cache_dir;
}

DataSource open_data_source(const Config& cfg) {
  DataSource src;
  const auto& d = cfg.data;
  if (d.source == "kjv" || d.source == "text") {
    const std::string cache = data_cache_dir(d);
    std::string corpus = d.source == "kjv" ? kjv_corpus_path(cache) : d.path;
    STRATA_CHECK(std::filesystem::is_regular_file(corpus), "data.path=", corpus,
                 " does not exist or is not a file; give a UTF-8 text file");
    if (d.source == "text") check_text_corpus(corpus);
    Tokenizer tok = Tokenizer::for_corpus(corpus, d.tokenizer_vocab, cache);
    src.shape.vocab_size = tok.vocab_size();
    src.tokenizer_path = tok.model_path();
    src.description = corpus;
  } else if (d.source == "tokens") {
    src.description = d.path;  // the vocabulary is the model's (Note [token files])
  } else if (d.source == "fashion-mnist") {
    src.shape = DataShape{0, 28, 1, 10};
    src.description = d.path.empty() ? kFashionDir : d.path;
  } else {
    src.description = "synthetic";
  }
  return src;
}

void build_datasets(DataSource& src, const Config& cfg, const ModelSpec& spec) {
  const auto& d = cfg.data;
  const auto seed = static_cast<uint64_t>(cfg.training.seed);
  const bool lm = is_language_model(spec.family);
  if (d.source == "kjv" || d.source == "text") {
    STRATA_CHECK(lm, "data.source=", d.source, " is text but model.flavour=", spec.flavour,
                 " takes images; use data.source=fashion-mnist or synthetic");
    auto tokens = load_token_stream(src.description, src.tokenizer_path, data_cache_dir(d));
    const auto n = static_cast<int64_t>(tokens->size());
    const auto split = static_cast<int64_t>(static_cast<double>(n) * (1.0 - d.eval_fraction));
    const bool mlm = spec.family == Family::kBert;
    Tokenizer tok(src.tokenizer_path);
    src.train = std::make_shared<TokenDataset>(tokens, 0, split, spec.seq_len, mlm, spec.vocab_size,
                                               tok.mask_id(), seed);
    if (d.eval_fraction > 0)
      src.eval = std::make_shared<TokenDataset>(tokens, split, n, spec.seq_len, mlm,
                                                spec.vocab_size, tok.mask_id(), seed + 1);
    src.description += c10::str(" (", n, " tokens, vocabulary ", src.shape.vocab_size, ")");
  } else if (d.source == "tokens") {
    STRATA_CHECK(spec.family == Family::kGpt, "data.source=tokens feeds causal language models; ",
                 "model.flavour=", spec.flavour, " is not a GPT flavour");
    auto shards = std::make_shared<const TokenShards>(d.path, d.token_format);
    const bool tail = d.eval_path.empty();
    auto train = std::make_shared<TokenFileDataset>(shards, spec.seq_len, spec.vocab_size, 0,
                                                    tail ? 1.0 - d.eval_fraction : 1.0);
    src.train = train;
    if (!tail)
      src.eval = std::make_shared<TokenFileDataset>(
          std::make_shared<const TokenShards>(d.eval_path, d.token_format), spec.seq_len,
          spec.vocab_size);
    else if (d.eval_fraction > 0)
      src.eval = std::make_shared<TokenFileDataset>(shards, spec.seq_len, spec.vocab_size,
                                                    1.0 - d.eval_fraction, 1.0);
    src.description += c10::str(" (", shards->num_shards(), " file(s), ", shards->total_tokens(),
                                " tokens, ", train->windows(), " windows, memory-mapped)");
  } else if (d.source == "fashion-mnist") {
    STRATA_CHECK(!lm, "data.source=fashion-mnist holds images but model.flavour=", spec.flavour,
                 " is a language model; use resnet-18, resnet-50 or mlp");
    const std::string dir = d.path.empty() ? kFashionDir : d.path;
    src.train = load_fashion_mnist(dir, "train");
    src.eval = load_fashion_mnist(dir, "t10k");
  } else if (lm) {
    src.train = SyntheticDataset::tokens(kSyntheticSize, spec.seq_len, spec.vocab_size, seed);
    src.eval = SyntheticDataset::tokens(4096, spec.seq_len, spec.vocab_size, seed + 1);
  } else {
    src.train = SyntheticDataset::images(kSyntheticSize, spec.in_channels, spec.image_size,
                                         spec.num_classes, seed);
    src.eval = SyntheticDataset::images(4096, spec.in_channels, spec.image_size, spec.num_classes,
                                        seed + 1);
  }
}

}  // namespace strata
