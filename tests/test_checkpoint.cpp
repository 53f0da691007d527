#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "strata/core/errors.h"
#include "strata/train/checkpoint.h"
#include "test_util.h"

using namespace strata;

TEST(Checkpoint, ShardsAssembleAnyRegion) {
  const std::string root = test::temp_dir("ckpt");
  const std::string tmp = root + "/" + checkpoint_dir_name(5) + ".tmp";
  at::Tensor full = at::arange(24, at::kFloat).view({4, 6});
  // Two ranks each hold half the rows; rank 1 also holds a whole small tensor.
  write_shard(tmp, 0, {{"w", full.narrow(0, 0, 2), {4, 6}, {0, 0}}});
  write_shard(
      tmp, 1,
      {{"w", full.narrow(0, 2, 2), {4, 6}, {2, 0}}, {"v", at::ones({3}, at::kLong), {}, {}}});
  finalize_checkpoint(root, 5, {{"step", 5}}, 2);
  EXPECT_FALSE(std::filesystem::exists(tmp));
  const std::string dir = resolve_checkpoint(root, "latest");
  EXPECT_EQ(dir, root + "/step-00000005");
  CheckpointReader r(dir);
  EXPECT_EQ(r.meta()["step"], 5);
  at::Tensor whole = at::empty({4, 6});
  r.read("w", whole);
  EXPECT_TRUE(at::equal(whole, full));
  // A region that straddles both pieces: rows 1..2, columns 3..5.
  at::Tensor part = at::empty({2, 3});
  r.read("w", part, {1, 3});
  EXPECT_TRUE(at::equal(part, full.narrow(0, 1, 2).narrow(1, 3, 3)));
  at::Tensor v = at::empty({3}, at::kLong);
  r.read("v", v);
  EXPECT_EQ(v.sum().item<int64_t>(), 3);
  EXPECT_THROW(r.read("missing", v), Error);
}

TEST(Checkpoint, CorruptionIsDetectedAndOldOnesPruned) {
  const std::string root = test::temp_dir("ckpt2");
  for (int64_t step : {1, 2, 3}) {
    write_shard(root + "/" + checkpoint_dir_name(step) + ".tmp", 0,
                {{"w", at::ones({16}) * step, {}, {}}});
    finalize_checkpoint(root, step, {{"step", step}}, 2);
  }
  EXPECT_FALSE(std::filesystem::exists(root + "/step-00000001"));
  EXPECT_TRUE(std::filesystem::exists(root + "/step-00000002"));
  const std::string dir = resolve_checkpoint(root, "latest");
  EXPECT_EQ(dir, root + "/step-00000003");
  {
    std::fstream f(dir + "/shard-0.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5);
    f.put('\x7f');
  }
  CheckpointReader r(dir);
  at::Tensor w = at::empty({16});
  try {
    r.read("w", w);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fails its checksum"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, FlatRunsOfBoxes) {
  // A whole tensor and a slice of whole rows are one run each.
  auto whole = flat_runs({4, 6}, {0, 0}, {4, 6});
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].length, 24);
  auto rows = flat_runs({4, 6}, {2, 0}, {2, 6});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].global, 12);
  // Columns 2..3 of every row (a column-parallel slice of the input features):
  // one run per row.
  auto cols = flat_runs({4, 6}, {0, 2}, {4, 2});
  ASSERT_EQ(cols.size(), 4u);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(cols[r].global, r * 6 + 2);
    EXPECT_EQ(cols[r].local, r * 2);
    EXPECT_EQ(cols[r].length, 2);
  }
  // 3-D: a box over the middle dimension runs over its rows' whole last dimension.
  auto mid = flat_runs({2, 3, 4}, {1, 1, 0}, {1, 2, 4});
  ASSERT_EQ(mid.size(), 1u);
  EXPECT_EQ(mid[0].global, 12 + 4);
  EXPECT_EQ(mid[0].length, 8);
  EXPECT_EQ(flat_runs({}, {}, {}).size(), 1u);  // a scalar
}

TEST(Checkpoint, FlatRangesOfBoxes) {
  // ZeRO shards of a tensor-parallel slice: elements [3, 7) of the box of columns
  // 2..4 (3 wide) of a 4 x 6 tensor are (1,2)..(2,0) of the box: global 8..10, 14.
  auto runs = box_flat_runs({4, 6}, {0, 2}, {4, 3}, 3, 4);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].global, 8);
  EXPECT_EQ(runs[0].local, 0);
  EXPECT_EQ(runs[0].length, 3);
  EXPECT_EQ(runs[1].global, 14);
  EXPECT_EQ(runs[1].local, 3);
  EXPECT_EQ(runs[1].length, 1);
  // Of a row slice (whole rows): one run.
  auto rows = box_flat_runs({4, 6}, {2, 0}, {2, 6}, 5, 4);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].global, 17);
}

TEST(Checkpoint, FlatShardsAndBoxesReadEachOther) {
  // ZeRO writes flat ranges of the flattened tensor (uneven, one crossing rows);
  // a reader asks for boxes (whole, rows, columns) and for other flat ranges.
  const std::string root = test::temp_dir("ckpt-flat");
  const std::string tmp = root + "/" + checkpoint_dir_name(1) + ".tmp";
  at::Tensor full = at::arange(24, at::kFloat).view({4, 6});
  at::Tensor flat = full.view({-1});
  write_shard(tmp, 0, {{"w", flat.narrow(0, 0, 10), {4, 6}, {}, 0}});
  write_shard(tmp, 1, {{"w", flat.narrow(0, 10, 14), {4, 6}, {}, 10}});
  // A column-split tensor (tensor-parallel row-parallel weight) written as boxes.
  write_shard(
      tmp, 2,
      {{"c", full.narrow(1, 0, 3), {4, 6}, {0, 0}}, {"c", full.narrow(1, 3, 3), {4, 6}, {0, 3}}});
  // The same column split, each box in two ZeRO shards (flat ranges of the box).
  const at::Tensor left = full.narrow(1, 0, 3).contiguous().view({-1});
  const at::Tensor right = full.narrow(1, 3, 3).contiguous().view({-1});
  write_shard(tmp, 3,
              {{"z", left.narrow(0, 0, 5), {4, 6}, {0, 0}, 0, {4, 3}},
               {"z", left.narrow(0, 5, 7), {4, 6}, {0, 0}, 5, {4, 3}},
               {"z", right.narrow(0, 0, 8), {4, 6}, {0, 3}, 0, {4, 3}},
               {"z", right.narrow(0, 8, 4), {4, 6}, {0, 3}, 8, {4, 3}}});
  finalize_checkpoint(root, 1, {{"step", 1}}, 2);
  CheckpointReader r(root + "/step-00000001");
  at::Tensor z = at::empty({4, 6});
  r.read("z", z);
  EXPECT_TRUE(at::equal(z, full));
  // Read back as another split's ZeRO range: elements 2..6 of the box of columns 1..4.
  at::Tensor zr = at::empty({5});
  r.read_box_flat("z", zr, {0, 1}, {4, 4}, 2);
  EXPECT_TRUE(at::equal(zr, full.narrow(1, 1, 4).contiguous().view({-1}).narrow(0, 2, 5)));
  at::Tensor wr = at::empty({4});
  r.read_box_flat("w", wr, {1, 3}, {2, 3}, 1);  // from the flat ZeRO pieces of w
  EXPECT_TRUE(
      at::equal(wr, full.narrow(0, 1, 2).narrow(1, 3, 3).contiguous().view({-1}).narrow(0, 1, 4)));
  EXPECT_THROW(r.read_box_flat("w", wr, {3, 3}, {2, 3}, 0), Error);
  at::Tensor whole = at::empty({4, 6});
  r.read("w", whole);
  EXPECT_TRUE(at::equal(whole, full));
  at::Tensor cols = at::empty({4, 2});
  r.read("w", cols, {0, 2});
  EXPECT_TRUE(at::equal(cols, full.narrow(1, 2, 2)));
  at::Tensor range = at::empty({7});
  r.read_flat("c", range, 5);  // crosses the two column boxes and a row end
  EXPECT_TRUE(at::equal(range, flat.narrow(0, 5, 7)));
  at::Tensor from_flat = at::empty({6});
  r.read_flat("w", from_flat, 8);
  EXPECT_TRUE(at::equal(from_flat, flat.narrow(0, 8, 6)));
  // A region past the tensor, or a shape the model does not have, is one clear error.
  EXPECT_THROW(r.read("w", at::empty({5, 6})), Error);
  try {
    r.expect_shape("w", {6, 4});
    ADD_FAILURE() << "a differing shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w' has shape [4, 6] but this model's is [6, 4]"),
              std::string::npos)
        << e.what();
  }
}
