// Checkpoints that describe shards, not layouts (Note [component state]): a ZeRO-3
// checkpoint written at dp=2 resumes at other dp sizes, ZeRO stages and under DDP and
// continues as a run that used the new layout all along; nobody gathers to save.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "test_util.h"

using namespace strata::test;
namespace fs = std::filesystem;

namespace {
// Debug GPT on the KJV, fp32, dropout 0, global batch 8, 12 steps.
const std::string kCommon =
    "--training.steps=12 --training.batch_size=8 --model.dropout=0 --model.seq_len=64 ";

}  // namespace

TEST(Reshard, ZeroThreeCheckpointResumesUnderOtherLayouts) {
  // Written at dp=2 ZeRO-3 at step 6 (each rank its own flat shards). Resumed at
  // (a) dp=1, (b) dp=4 ZeRO-1, (c) dp=2 DDP: steps 7-12 must match a run that used
  // the new layout from step 1 (layouts agree to ~1e-7 in fp32; the sampler's global
  // position makes the batches the same). Bound: 1e-5 relative.
  const std::string src =
      train_ok("reshard-src", kCommon + "--nproc 2 --parallel.zero=3 --checkpoint.interval=6");
  const std::string ckpt = src + "/checkpoints/step-00000006";
  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{
           {"dp1", ""}, {"dp4-zero1", "--nproc 4 --parallel.zero=1"}, {"dp2-ddp", "--nproc 2"}}) {
    const std::string ref =
        train_ok("reshard-ref-" + name, kCommon + layout + " --checkpoint.save_final=false");
    const std::string res = train_ok("reshard-res-" + name, kCommon + layout +
                                                                " --checkpoint.save_final=false"
                                                                " --checkpoint.resume=" +
                                                                ckpt);
    const auto want = read_losses(ref + "/metrics.jsonl");
    const auto got = read_losses(res + "/metrics.jsonl");
    ASSERT_EQ(want.size(), 12u) << name;
    ASSERT_EQ(got.size(), 6u) << name;
    for (size_t i = 0; i < 6; ++i)
      EXPECT_NEAR(got[i], want[6 + i], 1e-5 * std::abs(want[6 + i])) << name << " step " << 7 + i;
  }
}

TEST(Reshard, SaveWritesOnlyEachRanksShard) {
  // ZeRO-3 at dp=2: each rank writes its half of the model states, and rank 0's peak
  // while saving stays within what it holds plus a bounded buffer: no gather (the
  // gathered save of earlier versions added 2x the whole fp32 model states, ~30 MiB
  // for this model, on rank 0).
  const std::string dir = train_ok("reshard-save",
                                   "--training.steps=2 --training.batch_size=8 "
                                   "--model.seq_len=64 --nproc 2 --parallel.zero=3 "
                                   "--checkpoint.interval=2");
  const auto recs = read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 2u);
  const auto& last = recs.back();
  ASSERT_TRUE(last.contains("checkpoint")) << last.dump();
  const int64_t before = last["checkpoint"]["mem_before"], peak = last["checkpoint"]["mem_peak"];
  const int64_t step_peak = last["mem_peak_total"];
  EXPECT_LE(peak, step_peak) << last.dump();
  EXPECT_LE(peak - before, 64 * 1024) << last.dump();
  const std::string ck = dir + "/checkpoints/step-00000002";
  const auto s0 = fs::file_size(ck + "/shard-0.bin"), s1 = fs::file_size(ck + "/shard-1.bin");
  // Each shard holds about half (ZeRO pads the flat buffers; rank-local RNG states).
  EXPECT_LT(static_cast<double>(s0), 0.55 * static_cast<double>(s0 + s1));
  EXPECT_LT(static_cast<double>(s1), 0.55 * static_cast<double>(s0 + s1));
}

TEST(Reshard, Fp16LossScaleAndRefusalOfAnotherModel) {
  // A loss-scaled fp16 run at dp=2 skips step 3 (scale 65536 -> 32768); resumed at
  // dp=1 it keeps the scale and the count of skipped steps.
  const std::string src = temp_dir("reshard-fp16");
  auto r = run("env STRATA_INJECT_INF=1:3 " +
                   train_command(src,
                                 "--training.steps=8 --training.batch_size=4 "
                                 "--model.seq_len=32 --nproc 2 --memory.precision=fp16 "
                                 "--checkpoint.interval=4"),
               300);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string ckpt = src + "/checkpoints/step-00000004";
  const std::string res = train_ok("reshard-fp16-res",
                                   "--training.steps=8 --training.batch_size=4 --model.seq_len=32 "
                                   "--memory.precision=fp16 --checkpoint.save_final=false "
                                   "--checkpoint.resume=" +
                                       ckpt);
  const auto recs = read_metrics(res + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0]["loss_scale"].get<double>(), 32768.0) << recs[0].dump();
  EXPECT_EQ(recs[0]["skipped_steps"].get<int64_t>(), 1) << recs[0].dump();
  // Another model shape: refused at the first differing tensor, both shapes named.
  expect_one_error_line(train_command(temp_dir("reshard-other"),
                                      "--training.steps=8 --training.batch_size=4 "
                                      "--model.seq_len=32 --model.d_model=64 "
                                      "--checkpoint.resume=" +
                                          ckpt),
                        "checkpoint tensor 'model.wte.weight' has shape [8192, 96] but this "
                        "model's is [8192, 64]");
}
