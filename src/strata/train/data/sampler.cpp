#include "strata/train/data/sampler.h"

#include "strata/core/errors.h"

namespace strata {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Element i of a keyed permutation of [0, n) (Note [large datasets]): a 4-round
// balanced Feistel network on 2h bits (2^2h >= n), repeated while the result is >= n.
int64_t feistel_permute(int64_t i, int64_t n, uint64_t key) {
  int h = 1;
  while ((int64_t{1} << (2 * h)) < n) ++h;
  const uint64_t mask = (uint64_t{1} << h) - 1;
  auto x = static_cast<uint64_t>(i);
  do {
    uint64_t l = x >> h, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t s = key ^ (r * 0x9e3779b97f4a7c15ull) ^ (round << 56);
      const uint64_t f = splitmix64(s) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << h) | r;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}
}  // namespace

int64_t DistributedSampler::index_at(int64_t epoch, int64_t k) const {
  const int64_t g = k * replicas_ + rank_;
  if (!shuffle_) return g;
  if (size_ > kMaterializeLimit) {
    uint64_t s = epoch_key(epoch);
    return feistel_permute(g, size_, splitmix64(s));
  }
  if (cached_epoch_ != epoch) {  // the epoch's shuffle, built once
    cached_ = epoch_indices(epoch);
    cached_epoch_ = epoch;
  }
  return cached_[static_cast<size_t>(k)];
}

uint64_t DistributedSampler::epoch_key(int64_t epoch) const {
  return seed_ * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(epoch) + 1;
}

DistributedSampler::DistributedSampler(int64_t size, int64_t replicas, int64_t rank, uint64_t seed,
                                       bool shuffle)
    : size_(size), replicas_(replicas), rank_(rank), seed_(seed), shuffle_(shuffle) {
  STRATA_ASSERT(replicas >= 1 && rank >= 0 && rank < replicas);
  per_replica_ = size / replicas;
  STRATA_CHECK(per_replica_ > 0, "the dataset has ", size, " samples, fewer than the ", replicas,
               " data-parallel ranks; use more data or fewer ranks");
}

std::vector<int64_t> DistributedSampler::epoch_indices(int64_t epoch) const {
  std::vector<int64_t> perm(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) perm[static_cast<size_t>(i)] = i;
  if (shuffle_) {
    uint64_t state = epoch_key(epoch);
    for (int64_t i = size_ - 1; i > 0; --i) {
      auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    }
  }
  std::vector<int64_t> out(static_cast<size_t>(per_replica_));
  for (int64_t k = 0; k < per_replica_; ++k)
    out[static_cast<size_t>(k)] = perm[static_cast<size_t>(k * replicas_ + rank_)];
  return out;
}

std::vector<int64_t> DistributedSampler::next(int64_t n) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(out.size()) < n) {
    if (state_.offset >= per_replica_) {
      state_.epoch += 1;
      state_.offset = 0;
    }
    out.push_back(index_at(state_.epoch, state_.offset++));
  }
  return out;
}

void DistributedSampler::set_state(const State& s) {
  STRATA_CHECK(s.epoch >= 0 && s.offset >= 0 && s.offset <= per_replica_, "sampler state (epoch ",
               s.epoch, ", offset ", s.offset, ") does not fit this dataset (", per_replica_,
               " samples per rank); resume with the same data and layout");
  state_ = s;
}

}  // namespace strata
