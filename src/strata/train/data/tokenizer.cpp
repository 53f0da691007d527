#include "strata/train/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/train/data/dataset.h"

namespace strata {

namespace {
// Note [library messages]: sentencepiece's statuses read "Internal:
// src/trainer_interface.cc(661) [(a) == (b)] Vocabulary size ...": the code and source
// position say nothing to a user. Keep the sentence after them.
std::string plain_message(const sentencepiece::util::Status& status) {
  std::string m = status.error_message();
  const auto pos = m.find(") ");
  if (pos != std::string::npos && m.find(".cc(") < pos) m = m.substr(pos + 2);
  if (!m.empty() && m.front() == '[') {
    const auto close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == '.')) m.pop_back();
  return m;
}
}  // namespace

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  auto status = sp_->Load(model_path);
  STRATA_CHECK(status.ok(), "cannot load tokenizer ", model_path, " (", plain_message(status), ")",
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
    // The library logs its command line to stderr before it reads --minloglevel.
    const int saved_stderr = dup(STDERR_FILENO);
    const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved_stderr >= 0 && devnull >= 0) dup2(devnull, STDERR_FILENO);
    auto status = sentencepiece::SentencePieceTrainer::Train(
        c10::str("--input=", corpus_path, " --model_prefix=", tmp, " --vocab_size=", vocab_size,
                 " --model_type=bpe --character_coverage=1.0 --byte_fallback=true --num_threads=2 "
                 "--minloglevel=2"
                 " --user_defined_symbols=[MASK] --bos_id=-1 --eos_id=-1 --pad_id=-1 --unk_id=0"
                 " --input_sentence_size=2000000 --shuffle_input_sentence=true "
                 "--seed_sentencepiece_size=200000"));
    if (saved_stderr >= 0 && devnull >= 0) dup2(saved_stderr, STDERR_FILENO);
    if (saved_stderr >= 0) close(saved_stderr);
    if (devnull >= 0) close(devnull);
    if (!status.ok()) {
      // The one failure a valid UTF-8 corpus can still meet: too few distinct pieces.
      const std::string why = plain_message(status);
      const bool vocab = why.find("ocab") != std::string::npos;
      STRATA_FAIL("cannot train a ", vocab_size, "-token tokenizer on ", corpus_path, " (", why,
                  "); ",
                  vocab ? "lower data.tokenizer_vocab or give a larger corpus"
                        : "check that the file is plain text with one passage a line");
    }
    std::filesystem::rename(tmp + ".model", prefix + ".model");
    std::filesystem::remove(tmp + ".vocab");
  });
  return Tokenizer(prefix + ".model");
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  STRATA_CHECK(status.ok(), "tokenizer cannot encode text (", plain_message(status), ")");
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  auto status = sp_->Decode(ids, &out);
  STRATA_CHECK(status.ok(), "tokenizer cannot decode ids (", plain_message(status), ")");
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int Tokenizer::mask_id() const {
  return sp_->PieceToId("[MASK]");
}

}  // namespace strata
