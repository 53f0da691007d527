#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/config.h"
#include "strata/models/flavours.h"
#include "strata/train/data/dataset.h"

namespace strata {

// The default corpus: the King James Bible from Debian's bible-kjv package, one verse a
// line, written once into the cache. A missing package is a one-line error.
std::string kjv_corpus_path(const std::string& cache_dir);

// The byte offset of the first byte that is not part of well-formed UTF-8 (overlong
// forms, surrogates and code points past U+10FFFF are ill-formed too), or of the
// first NUL byte, which no text corpus holds; -1 when the whole string is text.
int64_t first_invalid_utf8(std::string_view bytes);

// Checks a user's corpus before any tokenizer sees it: it must hold text (not only
// whitespace) and be UTF-8. Each failure is one error naming the file and the fix.
void check_text_corpus(const std::string& path);

// A token stream (the corpus encoded once and cached as int32) cut into
// non-overlapping windows of seq_len + 1 tokens. GPT: input = window[:-1], target =
// window[1:]. BERT: masked-LM (15% of positions: 80% [MASK], 10% random, 10% kept),
// deterministic from (seed, sample index).
class TokenDataset : public Dataset {
 public:
  TokenDataset(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t begin, int64_t end,
               int64_t seq_len, bool masked_lm, int64_t vocab_size, int mask_id, uint64_t seed);
  int64_t size() const override;
  Batch get(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const std::vector<int32_t>> tokens_;
  int64_t begin_, end_, seq_len_, vocab_size_;
  bool masked_lm_;
  int mask_id_;
  uint64_t seed_;
};

// Encodes the corpus with the tokenizer (cached by corpus and tokenizer).
std::shared_ptr<const std::vector<int32_t>> load_token_stream(const std::string& corpus_path,
                                                              const std::string& tokenizer_path,
                                                              const std::string& cache_dir);

}  // namespace strata
