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
