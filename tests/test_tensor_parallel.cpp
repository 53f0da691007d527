// Tensor parallelism (parallel/tensor, models' parallel linears and vocab-parallel
// embedding and loss): tp runs against one process on the same seed and global batch,
// and checkpoints moving between tp layouts.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

using namespace strata::test;

namespace {
// Debug GPT on the KJV, fp32, dropout 0, global batch 8, context 64, 10 steps.
const std::string kCommon =
    "--training.steps=10 --training.batch_size=8 --model.dropout=0 --model.seq_len=64 ";

void expect_losses_match(const std::string& ref, const std::string& dir, size_t offset, double tol,
                         const std::string& name) {
  const auto want = read_losses(ref + "/metrics.jsonl");
  const auto got = read_losses(dir + "/metrics.jsonl");
  ASSERT_EQ(got.size() + offset, want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[offset + i], tol * std::abs(want[offset + i]))
        << name << " step " << offset + i + 1;
}
}  // namespace

TEST(TensorParallel, MatchesOneProcess) {
  // Same seed, same global batch, the same full-size initial weights (each tp rank
  // keeps its slice): losses within 1e-5 relative at every step, parameters (the
  // slices read back as whole tensors from the checkpoints) within 1e-5 in L2.
  // Cases: GPT tp=2 tied and untied, dp=2 x tp=2 with DDP, BERT tp=2, and GPT tp=2 with
  // dropout 0.1 (masks keyed on the global element index: the same masks as one
  // process).
  struct Case {
    std::string name, model, layout;
  };
  for (const Case& c :
       {Case{"gpt", "", "--nproc 2 --parallel.tp=2"},
        Case{"gpt-untied", "--model.tied_embedding=false ", "--nproc 2 --parallel.tp=2"},
        Case{"gpt-dp2", "", "--nproc 4 --parallel.tp=2"},
        Case{"bert", "--model.flavour=bert-debug ", "--nproc 2 --parallel.tp=2"},
        Case{"gpt-dropout", "--model.dropout=0.1 ", "--nproc 2 --parallel.tp=2"}}) {
    const std::string ref = train_ok("tp-ref-" + c.name, kCommon + c.model);
    const std::string dir = train_ok("tp-" + c.name, kCommon + c.model + c.layout);
    expect_losses_match(ref, dir, 0, 1e-5, c.name);
    EXPECT_LT(max_param_diff(dir, ref, 10), 1e-5) << c.name;
  }
}

TEST(TensorParallel, CheckpointsMoveBetweenTpLayouts) {
  // Written at tp=2, resumed in one process, and the reverse: steps 6-10 match the
  // uninterrupted run of the new layout (1e-5).
  const std::string one = train_ok("tp-ck-one", kCommon + "--checkpoint.interval=5");
  const std::string two = train_ok("tp-ck-two", kCommon +
                                                    "--nproc 2 --parallel.tp=2 "
                                                    "--checkpoint.interval=5");
  const std::string to_one = train_ok(
      "tp-ck-to-one", kCommon + "--checkpoint.save_final=false --checkpoint.resume=" + two +
                          "/checkpoints/step-00000005");
  expect_losses_match(one, to_one, 5, 1e-5, "tp2 -> tp1");
  const std::string to_two =
      train_ok("tp-ck-to-two", kCommon +
                                   "--nproc 2 --parallel.tp=2 --checkpoint.save_final=false "
                                   "--checkpoint.resume=" +
                                   one + "/checkpoints/step-00000005");
  expect_losses_match(two, to_two, 5, 1e-5, "tp1 -> tp2");
}

TEST(TensorParallel, BadSettingsAreOneClearLine) {
  const std::string dir = temp_dir("tp-bad");
  expect_one_error_line(train_command(dir,
                                      "--nproc 2 --parallel.tp=2 --model.flavour=mlp "
                                      "--data.source=fashion-mnist"),
                        "is built whole");
  expect_one_error_line(train_command(dir, "--nproc 2 --parallel.tp=2 --parallel.zero=1"),
                        "with tp=2: ZeRO over the dp axis of a tensor-parallel run");
}
