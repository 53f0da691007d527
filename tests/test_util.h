#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata::test {

struct RunResult {
  int status = -1;     // exit status, or 128 + signal
  std::string output;  // stdout and stderr together
  double seconds = 0;
};
// Runs a shell command line with a hard time limit (the test fails rather than hangs).
RunResult run(const std::string& cmd, double limit_s = 240);
std::string strata_bin();
std::string comm_worker_bin();
std::string ddp_worker_bin();
std::string source_dir();
// `strata train` with run_dir, the progress bar off and no periodic evaluation, then args.
std::string train_command(const std::string& run_dir, const std::string& args);
// Runs `strata train` (train_command) in a fresh temp_dir(name), expecting success
// (a test failure naming the run otherwise); returns the run directory.
std::string train_ok(const std::string& name, const std::string& args, double limit_s = 300);
// A fresh empty directory under the build's temp area.
std::string temp_dir(const std::string& name);
// The records of a metrics.jsonl, in order.
std::vector<nlohmann::json> read_metrics(const std::string& metrics_path);
// "loss" values of metrics.jsonl, in order.
std::vector<double> read_losses(const std::string& metrics_path);
// Lines of text that contain needle.
int count_lines_with(const std::string& text, const std::string& needle);
// Runs cmd and expects bad-input handling: exit status 2 (a user error) and exactly
// one "error: " line, which contains message.
void expect_one_error_line(const std::string& cmd, const std::string& message, double limit_s = 60);

// Largest per-tensor ||a - b|| / ||b|| (L2) over the "model." tensors of two runs'
// checkpoints at step, the key third of attention qkv biases left out (see the
// definition).
double max_param_diff(const std::string& run_a, const std::string& run_b, int64_t step);
// dir's losses equal ref's from step offset + 1 on, within tol relative.
void expect_losses_match(const std::string& ref, const std::string& dir, size_t offset, double tol,
                         const std::string& name);

}  // namespace strata::test
