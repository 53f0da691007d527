#pragma once
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace strata {

// BPE tokenizer (sentencepiece). Trained on a corpus on first use and cached by
// (corpus content, vocabulary size), so every later run and every rank loads it.
class Tokenizer {
 public:
  // Loads the cached model for this corpus and vocabulary, training it first if
  // needed (under a file lock shared by local ranks).
  static Tokenizer for_corpus(const std::string& corpus_path, int64_t vocab_size,
                              const std::string& cache_dir);
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;

  std::vector<int> encode(const std::string& text) const;
  std::string decode(const std::vector<int>& ids) const;
  int64_t vocab_size() const;
  int mask_id() const;  // the [MASK] symbol for masked-LM
  const std::string& model_path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace strata
