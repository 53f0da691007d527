#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/train/data/dataset.h"

namespace strata {

// Note [token files]: data.source = tokens trains on files of token ids as nanoGPT and
// llm.c write them: nanoGPT's raw little-endian uint16 arrays, and llm.c's shards (a
// header of 256 int32: magic 20240520, version 1 (uint16 tokens) or 2 (uint32), the
// token count; then the tokens). data.path is one file or a glob of shards, taken in
// sorted order. Every file is memory-mapped, never read whole: resident memory grows
// with the windows a run touches, not with the files (madvise random). The header is
// checked at open (magic, version, a count that disagrees with the size); a token id at
// or above the model's vocabulary is found when its window is read: one error line
// naming the file and the byte offset.
class TokenShards {
 public:
  // format: auto (llm.c when the magic is there, else raw), llmc, raw.
  TokenShards(const std::string& pattern, const std::string& format);
  ~TokenShards();
  TokenShards(const TokenShards&) = delete;
  TokenShards& operator=(const TokenShards&) = delete;
  size_t num_shards() const { return shards_.size(); }
  int64_t tokens(size_t shard) const { return shards_[shard].count; }
  int64_t total_tokens() const;
  const std::string& path(size_t shard) const { return shards_[shard].path; }
  // Token i of a shard, and where it sits in its file (for error lines).
  int64_t token(size_t shard, int64_t i) const;
  int64_t byte_offset(size_t shard, int64_t i) const;

 private:
  struct Shard {
    std::string path;
    const uint8_t* map = nullptr;
    size_t size = 0;
    int64_t header = 0;  // bytes before the first token
    int width = 2;       // bytes per token
    int64_t count = 0;
  };
  std::vector<Shard> shards_;
};

// Windows of seq_len + 1 tokens, seq_len apart, inside one shard (none crosses a file
// boundary), numbered shard after shard; [begin, end) of that numbering. So the
// sampler's global permutation walks every shard, deterministically, and its
// checkpointed position is a position in this numbering.
class TokenFileDataset : public Dataset {
 public:
  TokenFileDataset(std::shared_ptr<const TokenShards> shards, int64_t seq_len, int64_t vocab_size,
                   double begin_fraction = 0, double end_fraction = 1);
  int64_t size() const override { return end_ - begin_; }
  Batch get(const std::vector<int64_t>& indices) const override;
  // Windows in all of the shards (before the fractions).
  int64_t windows() const { return offsets_.back(); }

 private:
  std::shared_ptr<const TokenShards> shards_;
  int64_t seq_len_, vocab_size_;
  std::vector<int64_t> offsets_;  // first window of each shard, and the total
  int64_t begin_ = 0, end_ = 0;
};

}  // namespace strata
