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
class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int64_t replicas, int64_t rank, uint64_t seed,
                     bool shuffle = true);

  int64_t per_replica() const { return per_replica_; }
  // This replica's indices for an epoch, in order.
  std::vector<int64_t> epoch_indices(int64_t epoch) const;
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
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_;
};

}  // namespace strata
