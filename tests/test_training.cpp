// End-to-end runs of `strata train` on the KJV corpus with the debug GPT.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

using namespace strata::test;

namespace {
std::string train(const std::string& dir, const std::string& args) {
  return strata_bin() + " train --logging.run_dir=" + dir + " --logging.progress=off " + args;
}
}  // namespace

TEST(Training, DebugGptLossFallsOnKjv) {
  const std::string dir = temp_dir("loss");
  auto r = run(
      train(dir, "--training.steps=40 --training.eval_interval=40 --checkpoint.save_final=false"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto losses = read_losses(dir + "/metrics.jsonl");
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses.front(), std::log(8192.0), 0.5);  // untrained: about uniform
  EXPECT_LT(losses.back(), losses.front() - 1.5) << r.output;
  EXPECT_NE(r.output.find("metrics: " + dir + "/metrics.jsonl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("eval loss"), std::string::npos) << r.output;
}

TEST(Training, ResumeReproducesLossesBitwise) {
  // Dropout on, so the restored RNG state matters too.
  const std::string common = "--training.steps=12 --model.dropout=0.1 --training.eval_interval=0 ";
  const std::string a = temp_dir("resume-a"), b = temp_dir("resume-b");
  auto ra = run(train(a, common + "--checkpoint.interval=6"));
  ASSERT_EQ(ra.status, 0) << ra.output;
  auto rb = run(train(b, common + "--checkpoint.resume=" + a + "/checkpoints/step-00000006"));
  ASSERT_EQ(rb.status, 0) << rb.output;
  auto la = read_losses(a + "/metrics.jsonl"), lb = read_losses(b + "/metrics.jsonl");
  ASSERT_EQ(la.size(), 12u);
  ASSERT_EQ(lb.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(la[6 + i], lb[i]) << "step " << 7 + i;
  EXPECT_NE(rb.output.find("resumed from"), std::string::npos) << rb.output;
}

TEST(Training, TwoRanksMatchOneProcessAndResume) {
  // Same global batch (8): dp=2 with 4 per rank against one process with 8.
  const std::string common =
      "--training.steps=6 --training.batch_size=8 --training.eval_interval=0 ";
  const std::string one = temp_dir("dp1"), two = temp_dir("dp2"), res = temp_dir("dp2-resume");
  ASSERT_EQ(run(train(one, common + "--checkpoint.save_final=false")).status, 0);
  auto r2 = run(train(two, common + "--nproc 2 --checkpoint.interval=3"));
  ASSERT_EQ(r2.status, 0) << r2.output;
  auto l1 = read_losses(one + "/metrics.jsonl"), l2 = read_losses(two + "/metrics.jsonl");
  ASSERT_EQ(l1.size(), 6u);
  ASSERT_EQ(l2.size(), 6u);
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(l2[i], l1[i], 1e-5 * std::abs(l1[i])) << "step " << i + 1;
  auto r3 = run(
      train(res, common + "--nproc 2 --checkpoint.resume=" + two + "/checkpoints/step-00000003"));
  ASSERT_EQ(r3.status, 0) << r3.output;
  auto l3 = read_losses(res + "/metrics.jsonl");
  ASSERT_EQ(l3.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(l3[i], l2[3 + i]) << "step " << 4 + i;
}

TEST(Training, BadInputIsOneClearLine) {
  const std::string dir = temp_dir("bad");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--training.lrr=1", "error: unknown config key training.lrr; did you mean training.lr?"},
      {"--data.source=text --data.path=/nonexistent/corpus.txt",
       "error: data.path=/nonexistent/corpus.txt does not exist"},
      {"--model.flavour=gtp2-124m",
       "error: unknown model flavour 'gtp2-124m'; did you mean 'gpt2-124m'?"},
      {"--config /nonexistent.toml", "error: config file /nonexistent.toml does not exist"},
      {"--nproc 3 --parallel.dp=2", "error: dp*tp*pp = 2*1*1 = 2 does not equal the world size 3"},
  };
  for (const auto& c : cases) expect_one_error_line(train(dir, c.args), c.message);
}

TEST(Training, OtherFamiliesLearn) {
  // MLP on Fashion-MNIST (Debian's IDX files) and the masked-LM BERT on the KJV.
  const std::string mlp = temp_dir("mlp"), bert = temp_dir("bert");
  auto r = run(
      train(mlp,
            "--model.flavour=mlp --data.source=fashion-mnist --training.steps=40 "
            "--training.batch_size=64 --training.eval_interval=0 --checkpoint.save_final=false"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto l = read_losses(mlp + "/metrics.jsonl");
  EXPECT_NEAR(l.front(), std::log(10.0), 0.3);
  EXPECT_LT(l.back(), 1.2) << r.output;
  r = run(train(bert,
                "--model.flavour=bert-debug --training.steps=20 --training.eval_interval=0 "
                "--checkpoint.save_final=false"));
  ASSERT_EQ(r.status, 0) << r.output;
  l = read_losses(bert + "/metrics.jsonl");
  EXPECT_LT(l.back(), l.front() - 0.5) << r.output;
}

TEST(Training, ResumeRestoresBatchNormStatistics) {
  // Train-mode BatchNorm uses batch statistics, so only evaluation shows whether the
  // running statistics (buffers, not parameters) came back from the checkpoint.
  const std::string common =
      "--model.flavour=resnet-18 --data.source=fashion-mnist --training.steps=4 "
      "--training.batch_size=8 --training.eval_interval=4 --training.eval_batches=2 ";
  const std::string a = temp_dir("bn-a"), b = temp_dir("bn-b");
  ASSERT_EQ(run(train(a, common + "--checkpoint.interval=2")).status, 0);
  auto r = run(train(b, common + "--checkpoint.resume=" + a + "/checkpoints/step-00000002"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto last_eval = [](const std::string& dir) {
    return read_metrics(dir + "/metrics.jsonl").back()["eval_loss"].get<double>();
  };
  EXPECT_EQ(last_eval(a), last_eval(b));
}
