// `strata estimate` from the command line: sizes and the FITS verdict (pure), the
// printout, one validation path with `strata train`, and the measured matrix: the
// estimator against real runs (bench/estimate/matrix.txt) with its error bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/cli/estimate.h"
#include "strata/core/errors.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

TEST(EstimateCli, ParsesSizes) {
  EXPECT_EQ(parse_size("80GiB"), 80LL << 30);
  EXPECT_EQ(parse_size("24GB"), 24'000'000'000LL);
  EXPECT_EQ(parse_size("512mib"), 512LL << 20);
  EXPECT_EQ(parse_size("1.5e9"), 1'500'000'000LL);
  for (const char* bad : {"", "GB", "12XB", "-3GB", "0"})
    EXPECT_THROW(parse_size(bad), Error) << bad;
}

TEST(EstimateCli, FitsOnlyWithTheMargin) {
  // Note [fit margin]: FITS needs the peak plus 8% within the limit.
  EXPECT_TRUE(fit_verdict(100, 108).fits);
  EXPECT_FALSE(fit_verdict(100, 107.9).fits);
  EXPECT_FALSE(fit_verdict(100, 99).fits);
  EXPECT_NEAR(fit_verdict(100, 200).slack, 92, 1e-9);
}

TEST(EstimateCli, PrintsCategoriesPeakAndVerdict) {
  const std::string base =
      strata_bin() + " estimate -c " + source_dir() + "/configs/kjv-debug.toml";
  RunResult r = run(base + " --device-memory 1GiB");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* s : {"parameters", "gradients", "optimizer", "activations", "comm_buffers",
                        "other", "peak", "at head.backward (peak)", "FITS in 1024 MiB"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  r = run(base + " --device-memory 100MiB");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("DOES NOT FIT in 100 MiB"), std::string::npos) << r.output;
  // Flags change the estimate as they change training: ZeRO-3 on 4 ranks holds a
  // quarter of the model states.
  r = run(base + " --json --parallel.dp=4 --parallel.zero=3");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["layout"], "dp=4 tp=1 pp=1 (world 4)");
  EXPECT_GT(j["category_peak"]["comm_buffers"].get<int64_t>(), 0);
}

TEST(EstimateCli, SameValidationAsTraining) {
  const std::string dir = temp_dir("estimate-validation");
  struct Case {
    std::string args, message;
  };
  // The same config on the same world (one process) gets the same message.
  const std::vector<Case> cases = {
      {"--model.flavour=gpt3", "unknown model flavour 'gpt3'"},
      {"--parallel.dp=4", "dp*tp*pp = 4*1*1 = 4 does not equal the world size 1"},
      {"--parallel.tp=3", "world size 1 is not divisible by tp*pp=3*1=3"},
      {"--training.batch_size=10 --training.micro_batch_size=4",
       "must be a multiple of micro_batch_size x dp"},
      {"--parallel.zero=5", "parallel.zero=5"},
      {"--memory.precision=fp8", "memory.precision"},
  };
  for (const auto& c : cases) {
    expect_one_error_line(strata_bin() + " estimate --nproc 1 " + c.args, c.message);
    expect_one_error_line(train_command(dir, c.args + " --training.steps=1"), c.message);
  }
  // Layouts training cannot run yet are still estimated, and checked against the model.
  expect_one_error_line(strata_bin() + " estimate --parallel.tp=3", "does not divide n_head=4");
  expect_one_error_line(strata_bin() + " estimate --parallel.pp=8", "is larger than n_layer=4");
  expect_one_error_line(strata_bin() + " estimate --device-memory 12XB", "is not a size");
  expect_one_error_line(strata_bin() + " estimate --compare " + dir + "/nothing", "does not exist");
}

namespace {
struct MatrixRow {
  std::string name;
  int ranks = 1;
  std::string flags;
};
std::vector<MatrixRow> read_matrix(const std::string& file) {
  std::ifstream in(source_dir() + "/bench/estimate/" + file);
  std::vector<MatrixRow> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto bar1 = line.find('|'), bar2 = line.find('|', bar1 + 1);
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    rows.push_back({trim(line.substr(0, bar1)), std::stoi(line.substr(bar1 + 1, bar2 - bar1 - 1)),
                    trim(line.substr(bar2 + 1))});
  }
  return rows;
}
}  // namespace

// Real runs, 3 steps each (the first step differs: DDP rebuilds its buckets, the
// optimizer state is made); rank 0's highest tracked peak against the estimate of
// the run's own config.toml, and the highest rank's against the highest stage's. Bounds from the
// issue: median |error| <= 3%, max <= 8%, and never FITS when the measured peak exceeds the limit.
static void check_matrix(const std::string& file, size_t min_rows) {
  const auto rows = read_matrix(file);
  ASSERT_GE(rows.size(), min_rows);
  std::vector<double> errors;
  std::ostringstream table;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const std::string dir = temp_dir("matrix-" + std::to_string(i));
    RunResult r = run(train_command(
        dir, c10::str("--nproc ", row.ranks, " --training.threads=", std::max(1, 2 / row.ranks),
                      " --training.steps=3 --checkpoint.interval=0 "
                      "--checkpoint.save_final=false ",
                      row.flags)));
    ASSERT_EQ(r.status, 0) << row.name << "\n" << r.output;
    r = run(strata_bin() + " estimate --json --compare " + dir);
    ASSERT_EQ(r.status, 0) << row.name << "\n" << r.output;
    const auto c = nlohmann::json::parse(r.output)["compare"];
    const double err = c["error"].get<double>();
    errors.push_back(std::abs(err));
    table << row.name << ": predicted " << c["predicted"].get<double>() / 1048576
          << " MiB, measured " << c["measured"].get<double>() / 1048576 << " MiB, error "
          << err * 100 << "%";
    // The highest rank (a pipeline's last stage, with the head) against the highest
    // stage's estimate, when it is not rank 0's own figure.
    ASSERT_TRUE(c.contains("highest")) << row.name << "\n" << r.output;
    const auto& h = c["highest"];
    double measured = c["measured"].get<double>();
    if (h["rank"].get<int64_t>() != 0 || h["predicted"] != c["predicted"]) {
      errors.push_back(std::abs(h["error"].get<double>()));
      measured = std::max(measured, h["measured"].get<double>());
      table << "; highest rank " << h["rank"] << ": predicted "
            << h["predicted"].get<double>() / 1048576 << " MiB, measured "
            << h["measured"].get<double>() / 1048576 << " MiB, error "
            << h["error"].get<double>() * 100 << "%";
    }
    table << "\n";
    // Just below the measured peak the verdict must be DOES NOT FIT (exit 1).
    r = run(c10::str(strata_bin(), " estimate --compare ", dir, " --device-memory ",
                     static_cast<int64_t>(measured) - 1));
    EXPECT_EQ(r.status, 1) << row.name << "\n" << r.output;
    EXPECT_NE(r.output.find("DOES NOT FIT"), std::string::npos) << row.name;
    std::filesystem::remove_all(dir);
  }
  std::vector<double> sorted = errors;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2
                            ? sorted[sorted.size() / 2]
                            : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  std::printf("%s%zu configurations: median |error| %.2f%%, max %.2f%%\n", table.str().c_str(),
              errors.size(), median * 100, sorted.back() * 100);
  EXPECT_LE(median, 0.03) << table.str();
  EXPECT_LE(sorted.back(), 0.08) << table.str();
}

TEST(EstimateCli, ZeroTwoPipelineStagesHoldTheRootsGradients) {
  // ZeRO-2 on a pipeline defers the root's reduction (Note [pipeline tied gradients
  // under ZeRO]): both ends hold their root's full .grad tensors from the first
  // micro-batch's backward to finalize(), beside the shard. Uncounted, the last stage
  // measured 12.4% above its estimate; counted as a transient of the head's backward
  // (and the root less its shard), it matched there but the first stage measured 11.1%
  // above its own. Now both within 3% (+0.3% and -0.4% when written, dp=1).
  const std::string dir = train_ok("zero2-pp",
                                   "--nproc 2 --training.threads=1 --training.steps=3 "
                                   "--checkpoint.save_final=false --parallel.pp=2 "
                                   "--parallel.zero=2 --training.micro_batch_size=1");
  ASSERT_FALSE(::testing::Test::HasFailure());
  const RunResult r = run(strata_bin() + " estimate --json --compare " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto c = nlohmann::json::parse(r.output)["compare"];
  EXPECT_LE(std::abs(c["error"].get<double>()), 0.03) << c.dump();  // rank 0: the first stage
  const auto& h = c["highest"];
  EXPECT_EQ(h["rank"].get<int64_t>(), 1) << h.dump();
  EXPECT_LE(std::abs(h["error"].get<double>()), 0.03) << h.dump();
}

TEST(EstimateMatrix, PredictedPeakWithinBoundsOfMeasured) {
  check_matrix("matrix.txt", 28);
}

TEST(EstimateMatrix, ModelStatesDominateWithinBounds) {
  // Large vocabulary, micro-batch 1-2, short sequences: where parameter-count
  // estimators are closest and first-step transients or a tied embedding's gradient
  // paths decide whether a run fits.
  check_matrix("matrix-states.txt", 8);
}
