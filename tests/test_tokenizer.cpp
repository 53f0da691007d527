#include <gtest/gtest.h>

#include "strata/core/config.h"
#include "strata/train/data/dataset.h"
#include "strata/train/data/source.h"
#include "strata/train/data/text.h"
#include "strata/train/data/tokenizer.h"

using namespace strata;

TEST(Tokenizer, KjvRoundTrip) {
  DataConfig dc;
  const std::string cache = data_cache_dir(dc);
  const std::string corpus = kjv_corpus_path(cache);
  Tokenizer tok = Tokenizer::for_corpus(corpus, 8192, cache);
  EXPECT_EQ(tok.vocab_size(), 8192);
  const std::string text = "In the beginning God created the heaven and the earth.";
  auto ids = tok.encode(text);
  EXPECT_LT(ids.size(), 20u);  // BPE merges common words
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_GT(tok.mask_id(), 0);
  // Characters never seen in training (digits, accents) round-trip through byte fallback.
  const std::string odd = "Zebras quizzically jog past 42 caf\u00e9s";
  EXPECT_EQ(tok.decode(tok.encode(odd)), odd);
}

TEST(Tokenizer, TokenDatasetShiftsTargets) {
  auto tokens = std::make_shared<std::vector<int32_t>>();
  for (int i = 0; i < 100; ++i) tokens->push_back(i);
  TokenDataset ds(tokens, 0, 100, 9, false, 100, 1, 0);
  EXPECT_EQ(ds.size(), 11);  // (100 - 1) / 9
  Batch b = ds.get({2});
  EXPECT_EQ(b.input[0][0].item<int64_t>(), 18);
  EXPECT_EQ(b.target[0][0].item<int64_t>(), 19);
  EXPECT_EQ(b.target[0][8].item<int64_t>(), 27);
  TokenDataset mlm(tokens, 0, 100, 9, true, 100, 1, 0);
  Batch m = mlm.get({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const auto masked = (m.target != -100).sum().item<int64_t>();
  EXPECT_GT(masked, 3);  // ~15% of 99 positions
  EXPECT_LT(masked, 35);
}
