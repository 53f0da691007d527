#include "strata/train/data/token_files.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "strata/core/errors.h"

namespace strata {
namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeader = 256 * 4;

std::vector<std::string> expand(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

int32_t le32(const uint8_t* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 |
                              static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

TokenShards::TokenShards(const std::string& pattern, const std::string& format) {
  const auto paths = expand(pattern);
  STRATA_CHECK(!paths.empty(), "data.path=", pattern,
               " matches no file; give a token file or a glob of shards (e.g. data/train_*.bin)");
  for (const auto& path : paths) {
    Shard s;
    s.path = path;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    STRATA_CHECK(fd >= 0, "cannot read ", path, ": ", std::strerror(errno));
    struct stat st {};
    fstat(fd, &st);
    s.size = static_cast<size_t>(st.st_size);
    if (s.size > 0) {
      void* m = mmap(nullptr, s.size, PROT_READ, MAP_SHARED, fd, 0);
      STRATA_CHECK(m != MAP_FAILED, "cannot map ", path, ": ", std::strerror(errno));
      madvise(m, s.size, MADV_RANDOM);  // windows are read at random: no read-ahead
      s.map = static_cast<const uint8_t*>(m);
    }
    close(fd);
    shards_.push_back(s);  // unmapped by the destructor even if a check below fails
    const bool magic = s.size >= kLlmcHeader && le32(s.map) == kLlmcMagic;
    if (format == "llmc" || (format == "auto" && magic)) {
      STRATA_CHECK(s.size >= kLlmcHeader, path, ": ", s.size,
                   " bytes, shorter than llm.c's 1024-byte header; is it a raw token file "
                   "(data.token_format=raw)?");
      STRATA_CHECK(magic, path, ": wrong magic ", le32(s.map),
                   " at offset 0 (llm.c shards start with ", kLlmcMagic,
                   "); is it a raw token file (data.token_format=raw)?");
      const int32_t version = le32(s.map + 4);
      STRATA_CHECK(version == 1 || version == 2, path, ": llm.c version ", version,
                   " at offset 4 is not 1 (uint16 tokens) or 2 (uint32)");
      s.width = version == 1 ? 2 : 4;
      s.header = kLlmcHeader;
      s.count = le32(s.map + 8);
      const auto want = static_cast<size_t>(kLlmcHeader + s.count * s.width);
      STRATA_CHECK(s.count >= 0 && want == s.size, path, ": the header (offset 8) says ", s.count,
                   " tokens, ", want, " bytes with the header, but the file has ", s.size,
                   "; the shard is truncated or not llm.c's");
    } else {
      STRATA_CHECK(format == "raw" || format == "auto", "data.token_format=", format,
                   " is not one of auto, llmc, raw");
      STRATA_CHECK(
          s.size % 2 == 0, path, ": ", s.size,
          " bytes, not a whole number of uint16 tokens (nanoGPT's .bin); is it truncated?");
      s.count = static_cast<int64_t>(s.size / 2);
    }
    shards_.back() = s;
  }
}

TokenShards::~TokenShards() {
  for (const Shard& s : shards_)
    if (s.map) munmap(const_cast<uint8_t*>(s.map), s.size);
}

int64_t TokenShards::total_tokens() const {
  int64_t n = 0;
  for (const Shard& s : shards_) n += s.count;
  return n;
}

int64_t TokenShards::byte_offset(size_t shard, int64_t i) const {
  return shards_[shard].header + i * shards_[shard].width;
}

int64_t TokenShards::token(size_t shard, int64_t i) const {
  const Shard& s = shards_[shard];
  const uint8_t* p = s.map + s.header + i * s.width;
  if (s.width == 2) return static_cast<int64_t>(p[0]) | static_cast<int64_t>(p[1]) << 8;
  return static_cast<uint32_t>(le32(p));
}

TokenFileDataset::TokenFileDataset(std::shared_ptr<const TokenShards> shards, int64_t seq_len,
                                   int64_t vocab_size, double begin_fraction, double end_fraction)
    : shards_(std::move(shards)), seq_len_(seq_len), vocab_size_(vocab_size) {
  offsets_.push_back(0);
  for (size_t s = 0; s < shards_->num_shards(); ++s)
    offsets_.push_back(offsets_.back() + std::max<int64_t>(0, (shards_->tokens(s) - 1) / seq_len_));
  const double n = static_cast<double>(offsets_.back());
  begin_ = static_cast<int64_t>(n * begin_fraction);
  end_ = static_cast<int64_t>(n * end_fraction);
  STRATA_CHECK(end_ > begin_, "the token files hold ", shards_->total_tokens(),
               " tokens: too few for a window of ", seq_len_ + 1,
               " in this split; add data or lower model.seq_len");
}

Batch TokenFileDataset::get(const std::vector<int64_t>& indices) const {
  const auto B = static_cast<int64_t>(indices.size());
  at::Tensor window = at::empty({B, seq_len_ + 1}, at::kLong);
  auto* w = window.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = begin_ + indices[static_cast<size_t>(b)];
    const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), k);
    const auto shard = static_cast<size_t>(it - offsets_.begin() - 1);
    const int64_t start = (k - offsets_[shard]) * seq_len_;
    for (int64_t t = 0; t <= seq_len_; ++t) {
      const int64_t id = shards_->token(shard, start + t);
      STRATA_CHECK(id < vocab_size_, shards_->path(shard), ": token ", id, " at byte offset ",
                   shards_->byte_offset(shard, start + t), " is not below the model's vocabulary ",
                   vocab_size_, "; set model.vocab_size to the tokenizer's size");
      w[b * (seq_len_ + 1) + t] = id;
    }
  }
  Batch out;
  out.input = window.narrow(1, 0, seq_len_).contiguous();
  out.target = window.narrow(1, 1, seq_len_).contiguous();
  return out;
}

}  // namespace strata
