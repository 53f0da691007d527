#pragma once
#include <cstdint>
#include <vector>

namespace strata {

// Note [sampler]
// Each epoch is a permutation of [0, size) from (seed, epoch); the first
// floor(size / replicas) * replicas entries are dealt round-robin, so replica r
// gets perm[r], perm[r + R], ... The shards are disjoint and together complete,
// and the first k samples of every replica are, as a set, the first k*R samples of
// the permutation: a dp run sees the same global batch as one process.
// Note [large datasets]: above kMaterializeLimit samples (token files of billions of
// tokens) no index array is built (it would take 8 bytes a sample): the permutation is
// a keyed Feistel bijection on the next even power of two, cycle-walked into [0, size),
// evaluated per index. Smaller datasets keep the Fisher-Yates shuffle they always had.
class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int64_t replicas, int64_t rank, uint64_t seed,
                     bool shuffle = true);

  int64_t per_replica() const { return per_replica_; }
  static constexpr int64_t kMaterializeLimit = int64_t{1} << 22;
  // This replica's indices for an epoch, in order.
  std::vector<int64_t> epoch_indices(int64_t epoch) const;
  // This replica's k-th index of an epoch (no array for large datasets).
  int64_t index_at(int64_t epoch, int64_t k) const;
  // The next n indices, moving into the next epoch when this one is used up.
  std::vector<int64_t> next(int64_t n);

  struct State {
    int64_t epoch = 0;
    int64_t offset = 0;  // indices of the epoch already handed out
  };
  State state() const { return state_; }
  void set_state(const State& s);

 private:
  int64_t size_, replicas_, rank_, per_replica_;
  uint64_t seed_;
  bool shuffle_;
  State state_;
  uint64_t epoch_key(int64_t epoch) const;  // the shuffle's seed for an epoch
  // This replica's indices of one epoch (small datasets): index_at's cache.
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace strata
