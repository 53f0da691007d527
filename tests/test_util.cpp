#include "test_util.h"

#include <ATen/ATen.h>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>
#include <vector>

#include "strata/train/checkpoint.h"

namespace strata::test {

RunResult run(const std::string& cmd, double limit_s) {
  RunResult r;
  auto t0 = std::chrono::steady_clock::now();
  std::string full =
      "timeout -s KILL " + std::to_string(static_cast<int>(limit_s)) + " " + cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string strata_bin() {
  return STRATA_BIN;
}
std::string ddp_worker_bin() {
  return DDP_WORKER_BIN;
}
std::string comm_worker_bin() {
  return COMM_WORKER_BIN;
}
std::string source_dir() {
  return STRATA_SOURCE_DIR;
}

std::string train_command(const std::string& run_dir, const std::string& args) {
  return strata_bin() + " train --logging.run_dir=" + run_dir +
         " --logging.progress=off --training.eval_interval=0 " + args;
}

std::string train_ok(const std::string& name, const std::string& args, double limit_s) {
  const std::string dir = temp_dir(name);
  auto r = run(train_command(dir, args), limit_s);
  EXPECT_EQ(r.status, 0) << name << "\n" << r.output;
  return dir;
}

// Note [test directories]
// Every test process makes its run directories under the temp area, named by its pid.
// They are removed when the process's tests end, unless one failed: a failed run's
// files are what one reads to see why. Before this they stayed, up to 270 MB a test,
// until 69 GB of them filled the disk and a build could not write its objects.
namespace {
class TempDirs : public ::testing::Environment {
 public:
  void add(const std::filesystem::path& dir) { dirs_.push_back(dir); }
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Passed()) {
      for (const auto& d : dirs_) std::fprintf(stderr, "kept for a failed test: %s\n", d.c_str());
      return;
    }
    // A child a test left behind may still be writing: what cannot be removed stays.
    std::error_code ignored;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ignored);
  }

 private:
  std::vector<std::filesystem::path> dirs_;
};
// gtest owns (and deletes) the registered environment.
TempDirs* const temp_dirs =
    static_cast<TempDirs*>(::testing::AddGlobalTestEnvironment(new TempDirs));
}  // namespace

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("strata-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs->add(dir);
  return dir.string();
}

std::vector<nlohmann::json> read_metrics(const std::string& metrics_path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics_path);
  // A line without its newline is a record still being written (tests poll the file
  // of a running job): it is left for the next read.
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && !in.eof()) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<double> read_losses(const std::string& metrics_path) {
  std::vector<double> out;
  for (const auto& rec : read_metrics(metrics_path)) out.push_back(rec["loss"].get<double>());
  return out;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos;
  return n;
}

void expect_one_error_line(const std::string& cmd, const std::string& message, double limit_s) {
  auto r = run(cmd, limit_s);
  EXPECT_EQ(r.status, 2) << cmd << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << cmd << "\n" << r.output;
  EXPECT_EQ(count_lines_with(r.output, "error: "), 1) << cmd << "\n" << r.output;
}

// Largest per-tensor ||a - b|| / ||b|| (L2) over the parameters of two checkpoints.
// Note: an elementwise bound would not hold for any dp split: Adam divides each
// gradient element by its own running RMS, so elements whose gradient is at
// rounding level (rare tokens' embedding rows) move by about lr either way.
double max_param_diff(const std::string& run_a, const std::string& run_b, int64_t step) {
  const std::string name = "/checkpoints/" + strata::checkpoint_dir_name(step);
  strata::CheckpointReader a(run_a + name), b(run_b + name);
  double worst = 0;
  int64_t count = 0;
  // Every tensor any rank wrote (a ZeRO rank's shard holds only some of them).
  std::set<std::string> keys;
  for (const auto& f : std::filesystem::directory_iterator(run_a + name)) {
    const std::string file = f.path().filename().string();
    if (file.rfind("shard-", 0) != 0 || f.path().extension() != ".json") continue;
    std::ifstream meta(f.path());
    for (auto& piece : nlohmann::json::parse(meta)) {
      const std::string key = piece["name"];
      if (key.rfind("model.", 0) == 0) keys.insert(key);
    }
  }
  for (const std::string& key : keys) {
    at::Tensor ta = at::empty(a.global_shape(key)), tb = at::empty(b.global_shape(key));
    a.read(key, ta);
    b.read(key, tb);
    if (key.size() > 13 && key.substr(key.size() - 13) == "attn.qkv.bias") {
      // The key third of this bias has a gradient of exactly zero in exact arithmetic
      // (adding q.b_k to every score of a row leaves the softmax unchanged), so what
      // it gets is rounding noise that Adam scales up to steps of size lr in any
      // run, even two single-process runs that sum in another order. Compared: the
      // query and value thirds.
      const int64_t c = ta.size(0) / 3;
      ta = at::cat({ta.narrow(0, 0, c), ta.narrow(0, 2 * c, c)});
      tb = at::cat({tb.narrow(0, 0, c), tb.narrow(0, 2 * c, c)});
    }
    const double d = (ta - tb).norm().item<double>() / std::max(1e-12, tb.norm().item<double>());
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    ++count;
  }
  EXPECT_GT(count, 10) << "no parameters found in " << run_a << name;
  return worst;
}

void expect_losses_match(const std::string& ref, const std::string& dir, size_t offset, double tol,
                         const std::string& name) {
  const auto want = read_losses(ref + "/metrics.jsonl");
  const auto got = read_losses(dir + "/metrics.jsonl");
  ASSERT_EQ(got.size() + offset, want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[offset + i], tol * std::abs(want[offset + i]))
        << name << " step " << offset + i + 1;
}

}  // namespace strata::test
