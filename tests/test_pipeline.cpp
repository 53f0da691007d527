// Pipeline parallelism in training (parallel/pipeline through parallelize and the
// trainer): pp runs against one process on the same seed and global batch, checkpoints
// moving between pp layouts, and the settings a pipeline refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "test_util.h"

using namespace strata::test;

namespace {
// Debug GPT (4 blocks) on the KJV, fp32, dropout 0, global batch 8 in micro-batches of
// 2 (4 per step at dp=1), context 64, 20 steps, evaluation at steps 10 and 20.
const std::string kCommon =
    "--training.steps=20 --training.batch_size=8 --training.micro_batch_size=2 "
    "--model.dropout=0 --model.seq_len=64 --training.eval_interval=10 ";

struct Case {
  std::string name, model, layout;
  double tol = 1e-5, param_tol = 1e-5;
  // The evaluation loss too (at dp > 1 each replica evaluates other samples).
  bool eval = true;
};

void expect_match_one_process(const std::string& group, const std::vector<Case>& cases) {
  std::map<std::string, std::string> refs;  // one reference run per model
  for (const Case& c : cases) {
    if (!refs.contains(c.model))
      refs[c.model] = train_ok("pp-ref-" + group + "-" + c.name, kCommon + c.model);
    const std::string& ref = refs[c.model];
    const std::string dir = train_ok("pp-" + c.name, kCommon + c.model + c.layout);
    expect_losses_match(ref, dir, 0, c.tol, c.name);
    EXPECT_LT(max_param_diff(dir, ref, 20), c.param_tol) << c.name;
    if (!c.eval) continue;
    // Evaluation runs through the stages too.
    const auto want = read_metrics(ref + "/metrics.jsonl").back();
    const auto got = read_metrics(dir + "/metrics.jsonl").back();
    ASSERT_TRUE(got.contains("eval_loss")) << c.name;
    EXPECT_NEAR(got["eval_loss"].get<double>(), want["eval_loss"].get<double>(),
                c.tol * want["eval_loss"].get<double>())
        << c.name;
  }
}

const std::string pp2 = "--nproc 2 --parallel.pp=2 ", pp4 = "--nproc 4 --parallel.pp=4 ";
}  // namespace

TEST(PipelineParallel, SchedulesMatchOneProcess) {
  // Same seed, same global batch, the same initial weights (each stage keeps its
  // blocks): losses within 1e-5 relative at every step, parameters (each stage's read
  // back from the checkpoints) within 1e-5 in L2, the evaluation loss too. The tied
  // embedding's two copies (first and last stage) get the summed gradient.
  expect_match_one_process(
      "schedules",
      {
          {"1f1b", "", pp2},
          {"gpipe", "", pp2 + "--parallel.pp_schedule=gpipe "},
          {"interleaved", "", pp2 + "--parallel.pp_schedule=interleaved --parallel.pp_virtual=2 "},
          {"pp4", "", pp4},
          {"uneven", "", pp2 + "--parallel.pp_partition=3,1 "},
      });
}

TEST(PipelineParallel, ModelsPrecisionRecomputeAndDataParallelMatchOneProcess) {
  expect_match_one_process(
      "mixed", {
                   {"untied", "--model.tied_embedding=false ", pp2},
                   {"bert", "--model.flavour=bert-debug ", pp2},
                   {"full-recompute", "--memory.recompute=full ", pp2},
                   {"dp2-ddp", "", "--nproc 4 --parallel.pp=2 ", 1e-5, 1e-5, /*eval=*/false},
                   // Half precision against one-process half precision: the same bounds as tensor
                   // parallelism's (rounding order differs only at the stage boundary's cast).
                   {"bf16", "--memory.precision=bf16 ", pp2, 1e-4, 3e-2},
               });
}

TEST(PipelineParallel, Fp16OverflowOnOneStageSkipsTheStepOnEveryStage) {
  // Rank 1 (the last stage) alone gets an inf in a gradient at step 3: both stages
  // skip, the scale halves, and the losses stay those of one process that skipped the
  // same step.
  // 6 steps: fp16 GEMMs are slow on CPUs without half instructions.
  const std::string common =
      kCommon + "--training.steps=6 --memory.precision=fp16 --checkpoint.save_final=false ";
  const std::string ref = temp_dir("pp-fp16-ref");
  auto r = run("env STRATA_INJECT_INF=0:3 " + train_command(ref, common), 240);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string dir = temp_dir("pp-fp16");
  r = run("env STRATA_INJECT_INF=1:3 " + train_command(dir, common + pp2), 240);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto recs = read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 6u);
  EXPECT_TRUE(recs[2]["skipped"].get<bool>());
  EXPECT_EQ(recs[2]["loss_scale"].get<double>(), 32768);
  expect_losses_match(ref, dir, 0, 1e-4, "fp16 pp2 overflow");
}

TEST(PipelineParallel, CheckpointsMoveBetweenPpLayouts) {
  // Written at pp=2, resumed at pp=1 and at pp=4, and the reverse: steps 6-20 match the
  // uninterrupted run of the new layout (1e-5).
  const std::string ck = "--checkpoint.interval=5 --checkpoint.keep=4 ";
  const std::string one = train_ok("pp-ck-one", kCommon + ck);
  const std::string two = train_ok("pp-ck-two", kCommon + ck + pp2);
  const std::string four = train_ok("pp-ck-four", kCommon + ck + pp4);
  auto resume = [&](const std::string& name, const std::string& from, const std::string& layout) {
    return train_ok(name, kCommon + layout + "--checkpoint.save_final=false --checkpoint.resume=" +
                              from + "/checkpoints/step-00000005");
  };
  expect_losses_match(one, resume("pp-ck-2to1", two, ""), 5, 1e-5, "pp2 -> pp1");
  expect_losses_match(four, resume("pp-ck-2to4", two, pp4), 5, 1e-5, "pp2 -> pp4");
  expect_losses_match(two, resume("pp-ck-1to2", one, pp2), 5, 1e-5, "pp1 -> pp2");
  expect_losses_match(two, resume("pp-ck-4to2", four, pp2), 5, 1e-5, "pp4 -> pp2");
}

TEST(PipelineParallel, BadSettingsAreOneClearLine) {
  const std::string dir = temp_dir("pp-bad");
  expect_one_error_line(train_command(dir, kCommon + "--nproc 4 --parallel.pp=4 "
                                                     "--model.n_layer=3"),
                        "pp=4 is larger than n_layer=3; choose pp <= 3");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--parallel.pp_partition=3,2"),
                        "parallel.pp_partition='3,2' gives 2 stages and 5 blocks; it needs pp=2 "
                        "counts summing to the model's 4 blocks");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--parallel.pp_partition=4,0"),
                        "'0' is not a block count of at least 1");
  expect_one_error_line(
      train_command(dir, kCommon + pp2 +
                             "--model.n_layer=6 --parallel.pp_schedule=interleaved "
                             "--parallel.pp_virtual=2"),
      "needs blocks (6) divisible by 4");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--training.micro_batch_size=8"),
                        "the 1f1b schedule needs at least pp=2 micro-batches per step (got 1)");
  expect_one_error_line(train_command(dir, kCommon + "--parallel.pp_virtual=2"),
                        "parallel.pp_virtual=2 applies to the interleaved schedule only");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--parallel.pp_schedule=zb-h1"),
                        "the executor does not run its split backward yet");
  expect_one_error_line(
      train_command(dir, kCommon + pp2 + "--model.flavour=mlp --data.source=fashion-mnist"),
      "has no transformer blocks to cut into stages");
}
