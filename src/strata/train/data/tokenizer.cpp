#include "strata/train/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>

#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/train/data/dataset.h"

namespace strata {

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  auto status = sp_->Load(model_path);
  STRATA_CHECK(status.ok(), "cannot load tokenizer ", model_path, ": ", status.ToString(),
               "; delete it to retrain");
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::for_corpus(const std::string& corpus_path, int64_t vocab_size,
                                const std::string& cache_dir) {
  make_dirs(cache_dir);
  const std::string key =
      content_hash(read_file(corpus_path)) + "-v" + std::to_string(vocab_size) + "-bf";
  const std::string prefix = cache_dir + "/tokenizer-" + key;
  with_file_lock(cache_dir + "/.lock", [&] {
    if (std::filesystem::exists(prefix + ".model")) return;
    log_info("training a ", vocab_size, "-token BPE tokenizer on ", corpus_path,
             " (once; cached in ", cache_dir, ")");
    const std::string tmp = prefix + ".tmp" + std::to_string(getpid());
    auto status = sentencepiece::SentencePieceTrainer::Train(
        c10::str("--input=", corpus_path, " --model_prefix=", tmp, " --vocab_size=", vocab_size,
                 " --model_type=bpe --character_coverage=1.0 --byte_fallback=true --num_threads=2 "
                 "--minloglevel=2"
                 " --user_defined_symbols=[MASK] --bos_id=-1 --eos_id=-1 --pad_id=-1 --unk_id=0"
                 " --input_sentence_size=2000000 --shuffle_input_sentence=true "
                 "--seed_sentencepiece_size=200000"));
    STRATA_CHECK(status.ok(), "tokenizer training on ", corpus_path, " failed: ", status.ToString(),
                 "; a vocabulary of ", vocab_size,
                 " may be too large for this corpus, lower data.tokenizer_vocab");
    std::filesystem::rename(tmp + ".model", prefix + ".model");
    std::filesystem::remove(tmp + ".vocab");
  });
  return Tokenizer(prefix + ".model");
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  STRATA_CHECK(status.ok(), "tokenizer: ", status.ToString());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  auto status = sp_->Decode(ids, &out);
  STRATA_CHECK(status.ok(), "tokenizer: ", status.ToString());
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int Tokenizer::mask_id() const {
  return sp_->PieceToId("[MASK]");
}

}  // namespace strata
