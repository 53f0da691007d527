#include "strata/train/data/text.h"

#include <ATen/ATen.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/train/data/tokenizer.h"

namespace strata {

std::string kjv_corpus_path(const std::string& cache_dir) {
  make_dirs(cache_dir);
  const std::string path = cache_dir + "/kjv.txt";
  with_file_lock(cache_dir + "/.lock", [&] {
    if (std::filesystem::exists(path)) return;
    FILE* p = popen("bible -f \"Gen1:1-Rev22:21\" 2>/dev/null", "r");
    STRATA_CHECK(p, "cannot run the 'bible' program");
    std::string raw;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) raw.append(buf, n);
    int status = pclose(p);
    STRATA_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && raw.size() > 1000000,
                 "the default corpus needs Debian's bible-kjv package (apt-get install bible-kjv; "
                 "scripts/setup.sh does it), or set data.source=text data.path=<file>");
    // `bible -f` prints one verse a line, "Ge1:1 In the beginning ...": drop the reference.
    std::istringstream in(raw);
    std::string line, out;
    while (std::getline(in, line)) {
      size_t i = line.find(' ');
      if (i != std::string::npos && i + 1 < line.size()) out += line.substr(i + 1) + "\n";
    }
    write_file_atomic(path, out);
  });
  return path;
}

int64_t first_invalid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto n = static_cast<int64_t>(bytes.size());
  for (int64_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c == 0) return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Lead byte: the sequence length and the range its second byte must fall in
    // (Unicode's table of well-formed sequences, which excludes overlong forms,
    // surrogates and code points past U+10FFFF).
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return -1;
}

void check_text_corpus(const std::string& path) {
  const std::string text = read_file(path);
  STRATA_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, "data.path=", path,
               text.empty() ? " is empty" : " holds only whitespace",
               "; give a UTF-8 text file with the training corpus");
  const int64_t bad = first_invalid_utf8(text);
  if (bad < 0) return;
  const auto byte = static_cast<unsigned char>(text[static_cast<size_t>(bad)]);
  char what[32];
  std::snprintf(what, sizeof(what), byte == 0 ? "a NUL byte" : "byte 0x%02X", byte);
  STRATA_FAIL("data.path=", path, " is not UTF-8 text: ", what, " at offset ", bad,
              " starts no valid character; convert it (iconv -f LATIN1 -t UTF-8 FILE) or give a "
              "text file, not a binary one");
}

std::shared_ptr<const std::vector<int32_t>> load_token_stream(const std::string& corpus_path,
                                                              const std::string& tokenizer_path,
                                                              const std::string& cache_dir) {
  const std::string text = read_file(corpus_path);
  const std::string key = content_hash(text + "\n" + read_file(tokenizer_path));
  const std::string path = cache_dir + "/tokens-" + key + ".i32";
  with_file_lock(cache_dir + "/.lock", [&] {
    if (std::filesystem::exists(path)) return;
    Tokenizer tok(tokenizer_path);
    std::vector<int32_t> ids;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      auto piece = tok.encode(line);
      ids.insert(ids.end(), piece.begin(), piece.end());
    }
    write_file_atomic(path, std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  });
  std::string bytes = read_file(path);
  auto out = std::make_shared<std::vector<int32_t>>(bytes.size() / 4);
  std::memcpy(out->data(), bytes.data(), out->size() * 4);
  return out;
}

TokenDataset::TokenDataset(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t begin,
                           int64_t end, int64_t seq_len, bool masked_lm, int64_t vocab_size,
                           int mask_id, uint64_t seed)
    : tokens_(std::move(tokens)),
      begin_(begin),
      end_(end),
      seq_len_(seq_len),
      vocab_size_(vocab_size),
      masked_lm_(masked_lm),
      mask_id_(mask_id),
      seed_(seed) {
  STRATA_CHECK(size() > 0, "the text split has ", end - begin,
               " tokens, too few for one sequence of ", seq_len + 1,
               "; use a larger corpus or a smaller model.seq_len");
}

int64_t TokenDataset::size() const {
  return (end_ - begin_ - 1) / seq_len_;
}

Batch TokenDataset::get(const std::vector<int64_t>& indices) const {
  const auto B = static_cast<int64_t>(indices.size());
  at::Tensor window = at::empty({B, seq_len_ + 1}, at::kLong);
  auto* w = window.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = begin_ + indices[static_cast<size_t>(b)] * seq_len_;
    for (int64_t t = 0; t <= seq_len_; ++t)
      w[b * (seq_len_ + 1) + t] = (*tokens_)[static_cast<size_t>(start + t)];
  }
  Batch out;
  if (!masked_lm_) {
    out.input = window.narrow(1, 0, seq_len_).contiguous();
    out.target = window.narrow(1, 1, seq_len_).contiguous();
    return out;
  }
  at::Tensor input = window.narrow(1, 0, seq_len_).contiguous();
  at::Tensor target = at::full({B, seq_len_}, -100, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(
        seed_ * 1000003ull + static_cast<uint64_t>(indices[static_cast<size_t>(b)]));
    at::Tensor u = at::rand({seq_len_, 2}, gen);
    at::Tensor rnd = at::randint(vocab_size_, {seq_len_}, gen);
    auto* ui = input[b].data_ptr<int64_t>();
    auto* ti = target[b].data_ptr<int64_t>();
    auto* uu = u.data_ptr<float>();
    auto* rr = rnd.data_ptr<int64_t>();
    for (int64_t t = 0; t < seq_len_; ++t) {
      if (uu[2 * t] >= 0.15f) continue;
      ti[t] = ui[t];
      float r = uu[2 * t + 1];
      if (r < 0.8f) {
        ui[t] = mask_id_;
      } else if (r < 0.9f) {
        ui[t] = rr[t];
      }
    }
  }
  out.input = input;
  out.target = target;
  out.token_type = at::zeros_like(input);
  return out;
}

}  // namespace strata
