// The CUDA path, run by scripts/device-check.sh on a GPU machine (ctest -L cuda). Each
// test is a CPU equivalence test of tests/ run again with training.device=cuda; on a
// machine without a usable GPU (or a CPU build) every test skips with the reason.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "test_util.h"

using namespace strata::test;

namespace {

#define REQUIRE_CUDA()                                                                     \
  do {                                                                                     \
    if (!torch::cuda::is_available())                                                      \
      GTEST_SKIP() << "no usable CUDA device (or a CPU build): runs on a GPU machine via " \
                      "scripts/device-check.sh";                                           \
  } while (0)

std::string cuda_train(const std::string& dir, const std::string& args) {
  return train_command(dir, "--training.device=cuda " + args);
}

std::vector<double> losses_of(const std::string& dir) {
  return read_losses(dir + "/metrics.jsonl");
}

void expect_same_losses(const std::vector<double>& a, const std::vector<double>& b, double rel,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], rel * std::abs(b[i])) << what << ", step " << i + 1;
}

}  // namespace

TEST(Cuda, DebugGptLearns) {
  REQUIRE_CUDA();
  const std::string dir = temp_dir("cuda-learn");
  auto r = run(cuda_train(dir, "--training.steps=60 --checkpoint.save_final=false"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto l = losses_of(dir);
  ASSERT_EQ(l.size(), 60u);
  EXPECT_LT(l.back(), l.front() - 2.0) << r.output;
  auto recs = read_metrics(dir + "/metrics.jsonl");
  ASSERT_TRUE(recs.back().contains("cuda_mem")) << "no caching-allocator statistics";
  EXPECT_GT(recs.back()["cuda_mem"]["peak_allocated"].get<int64_t>(), 0);
}

TEST(Cuda, RecomputeReplaysTheCudaRngExactly) {
  // Dropout 0.1: a recomputed segment must draw the same masks from the CUDA
  // generator as the first forward, so every mode gives the losses of none.
  REQUIRE_CUDA();
  const std::string common =
      "--training.steps=8 --model.dropout=0.1 --checkpoint.save_final=false "
      "--training.deterministic=true ";
  const std::string none = temp_dir("cuda-rc-none");
  ASSERT_EQ(run(cuda_train(none, common + "--memory.recompute=none")).status, 0);
  for (const std::string mode : {"full", "sqrt", "selective"}) {
    const std::string dir = temp_dir("cuda-rc-" + mode);
    auto r = run(cuda_train(dir, common + "--memory.recompute=" + mode));
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_losses(losses_of(dir), losses_of(none), 1e-6, mode);
  }
}

TEST(Cuda, HalfPrecisionLearnsLikeFp32) {
  // bf16 (master weights), fp16 with dynamic loss scaling, and bf16 autocast end
  // within 3% of fp32 over 150 steps (mean of the last 20).
  REQUIRE_CUDA();
  const std::string common =
      "--training.steps=150 --training.batch_size=8 --model.seq_len=64 "
      "--checkpoint.save_final=false ";
  auto mean_last = [](const std::vector<double>& v) {
    double s = 0;
    for (size_t i = v.size() - 20; i < v.size(); ++i) s += v[i];
    return s / 20;
  };
  const std::string ref_dir = temp_dir("cuda-prec-fp32");
  ASSERT_EQ(run(cuda_train(ref_dir, common)).status, 0);
  const double ref = mean_last(losses_of(ref_dir));
  for (const std::string p : {"--memory.precision=bf16", "--memory.precision=fp16",
                              "--memory.precision=bf16 --memory.master_weights=false"}) {
    const std::string dir = temp_dir("cuda-prec");
    auto r = run(cuda_train(dir, common + p));
    ASSERT_EQ(r.status, 0) << r.output;
    const double m = mean_last(losses_of(dir));
    EXPECT_LT(std::abs(m - ref) / ref, 0.03) << p << ": " << m << " vs fp32 " << ref;
  }
}

TEST(Cuda, Zero3WithPinnedOffloadMatchesPlainAtDp1) {
  // ZeRO-3 at dp=1 with the optimizer state offloaded to pinned host memory
  // computes what the plain run computes.
  REQUIRE_CUDA();
  const std::string common = "--training.steps=10 --checkpoint.save_final=false ";
  const std::string plain = temp_dir("cuda-z3-plain"), z3 = temp_dir("cuda-z3");
  ASSERT_EQ(run(cuda_train(plain, common)).status, 0);
  auto r = run(cuda_train(z3, common + "--parallel.zero=3 --parallel.offload=true"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_losses(losses_of(z3), losses_of(plain), 1e-5, "zero3 offload");
}

TEST(Cuda, ResumeReproducesLossesBitwise) {
  REQUIRE_CUDA();
  const std::string common =
      "--training.steps=8 --model.dropout=0.1 --training.deterministic=true ";
  const std::string a = temp_dir("cuda-resume-a"), b = temp_dir("cuda-resume-b");
  ASSERT_EQ(run(cuda_train(a, common + "--checkpoint.interval=4")).status, 0);
  auto r = run(cuda_train(b, common + "--checkpoint.resume=" + a + "/checkpoints/step-00000004"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto la = losses_of(a), lb = losses_of(b);
  ASSERT_EQ(la.size(), 8u);
  ASSERT_EQ(lb.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(la[4 + i], lb[i]) << "step " << 5 + i;
}

TEST(Cuda, EstimatorAgainstTheCachingAllocator) {
  // One-rank rows of the estimator's matrices, trained on the GPU; the caching
  // allocator's highest peak_allocated against the prediction (the resident
  // dataset, "other", stays on the host). Bounds as on CPU: median <= 3%, max <= 8%.
  REQUIRE_CUDA();
  std::vector<std::pair<std::string, std::string>> rows;
  for (const std::string file : {"matrix.txt", "matrix-states.txt"}) {
    std::ifstream in(source_dir() + "/bench/estimate/" + file);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto b1 = line.find('|'), b2 = line.find('|', b1 + 1);
      if (std::stoi(line.substr(b1 + 1, b2 - b1 - 1)) != 1) continue;
      if (line.find("fashion-mnist") != std::string::npos) continue;
      rows.emplace_back(line.substr(0, b1), line.substr(b2 + 1));
    }
  }
  ASSERT_GE(rows.size(), 8u);
  std::vector<double> errors;
  std::string table;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string dir = temp_dir("cuda-matrix-" + std::to_string(i));
    auto r = run(cuda_train(dir,
                            "--training.steps=3 --checkpoint.interval=0 "
                            "--checkpoint.save_final=false " +
                                rows[i].second));
    ASSERT_EQ(r.status, 0) << rows[i].first << "\n" << r.output;
    double measured = 0;
    for (const auto& rec : read_metrics(dir + "/metrics.jsonl"))
      measured = std::max(measured, rec["cuda_mem"]["peak_allocated"].get<double>());
    r = run(strata_bin() + " estimate --json --compare " + dir);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto c = nlohmann::json::parse(r.output)["compare"];
    double predicted = c["predicted"].get<double>();
    for (const auto& cat : c["categories"])
      if (cat["category"] == "other") predicted -= cat["predicted_at_peak"].get<double>();
    const double err = (predicted - measured) / measured;
    errors.push_back(std::abs(err));
    table += rows[i].first + ": predicted " + std::to_string(predicted / 1048576) +
             " MiB, caching allocator " + std::to_string(measured / 1048576) + " MiB, error " +
             std::to_string(err * 100) + "%\n";
  }
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2];
  std::printf("%s%zu configurations on CUDA: median |error| %.2f%%, max %.2f%%\n", table.c_str(),
              errors.size(), median * 100, errors.back() * 100);
  EXPECT_LE(median, 0.03) << table;
  EXPECT_LE(errors.back(), 0.08) << table;
}
