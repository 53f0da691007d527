#include <gtest/gtest.h>

#include <set>

#include "strata/core/errors.h"
#include "strata/distributed/parallel_dims.h"

using namespace strata;

TEST(ParallelDims, RankCoordRoundTripAndTpInnermost) {
  for (auto [dp, tp, pp] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 1}, {2, 2, 2}, {3, 2, 1}, {1, 4, 2}, {4, 1, 3}}) {
    ParallelDims d(dp, tp, pp, dp * tp * pp);
    std::set<int64_t> seen;
    for (int64_t r = 0; r < d.world(); ++r) {
      Coord c = d.coord_of(r);
      EXPECT_EQ(d.rank_of(c), r);
      seen.insert(r);
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), d.world());
    if (tp > 1) EXPECT_EQ(d.coord_of(1).tp, 1);  // neighbours are a tp group
  }
  ParallelDims d(2, 2, 2, 8);
  EXPECT_EQ(d.rank_of({1, 0, 1}), 6);  // (pp * dp + dp_i) * tp + tp_i = (1*2+1)*2+0
  EXPECT_EQ(d.coord_of(5), (Coord{0, 1, 1}));
}

TEST(ParallelDims, GroupsPartitionTheWorld) {
  ParallelDims d(2, 2, 3, 12);
  for (Axis a : {Axis::kDp, Axis::kTp, Axis::kPp, Axis::kWorld}) {
    auto groups = d.groups(a);
    std::set<int64_t> all;
    for (auto& g : groups) {
      EXPECT_EQ(static_cast<int64_t>(g.size()), d.size(a));
      for (auto r : g) {
        EXPECT_TRUE(all.insert(r).second) << "rank " << r << " in two groups of " << axis_name(a);
        EXPECT_EQ(d.group_of(a, r), g);
      }
    }
    EXPECT_EQ(static_cast<int64_t>(all.size()), 12);
  }
  EXPECT_EQ(d.group_of(Axis::kTp, 4), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(d.group_of(Axis::kDp, 4), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(d.group_of(Axis::kPp, 1), (std::vector<int64_t>{1, 5, 9}));
}

TEST(ParallelDims, DpDerivedAndBadLayoutsExplainThemselves) {
  EXPECT_EQ(ParallelDims(0, 2, 1, 8).dp(), 4);
  try {
    ParallelDims(2, 1, 1, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not equal the world size 3"), std::string::npos)
        << e.what();
  }
  try {
    ParallelDims(0, 2, 1, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible by tp*pp"), std::string::npos) << e.what();
  }
  ParallelDims d(1, 4, 1, 4);
  EXPECT_THROW(d.check_model(6, 12), Error);
  EXPECT_NO_THROW(d.check_model(8, 12));
}
