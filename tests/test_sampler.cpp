#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "strata/train/data/sampler.h"

using namespace strata;

TEST(Sampler, ShardsAreDisjointAndComplete) {
  for (int64_t replicas : {1, 2, 3, 4}) {
    const int64_t n = 103;
    std::set<int64_t> all;
    for (int64_t r = 0; r < replicas; ++r) {
      DistributedSampler s(n, replicas, r, 42);
      auto idx = s.epoch_indices(3);
      EXPECT_EQ(static_cast<int64_t>(idx.size()), n / replicas);
      for (auto i : idx) EXPECT_TRUE(all.insert(i).second) << "index " << i << " given twice";
    }
    EXPECT_EQ(static_cast<int64_t>(all.size()), n / replicas * replicas);
  }
}

TEST(Sampler, DeterministicPerEpochAndShuffled) {
  DistributedSampler a(1000, 2, 1, 7), b(1000, 2, 1, 7), c(1000, 2, 1, 8);
  EXPECT_EQ(a.epoch_indices(0), b.epoch_indices(0));
  EXPECT_NE(a.epoch_indices(0), a.epoch_indices(1));
  EXPECT_NE(a.epoch_indices(0), c.epoch_indices(0));
  auto idx = a.epoch_indices(0);
  EXPECT_FALSE(std::is_sorted(idx.begin(), idx.end()));
}

TEST(Sampler, GlobalBatchMatchesOneProcess) {
  // The first k samples of each of R replicas are the first k*R of one process.
  DistributedSampler single(500, 1, 0, 3);
  auto first = single.next(16);
  std::multiset<int64_t> expect(first.begin(), first.end()), got;
  for (int64_t r = 0; r < 4; ++r) {
    DistributedSampler s(500, 4, r, 3);
    for (auto i : s.next(4)) got.insert(i);
  }
  EXPECT_EQ(got, expect);
}

TEST(Sampler, StateRestoresPositionAcrossEpochs) {
  DistributedSampler a(10, 1, 0, 1);
  a.next(7);
  auto st = a.state();
  auto rest = a.next(9);  // crosses into epoch 1
  EXPECT_EQ(a.state().epoch, 1);
  DistributedSampler b(10, 1, 0, 1);
  b.set_state(st);
  EXPECT_EQ(b.next(9), rest);
}
