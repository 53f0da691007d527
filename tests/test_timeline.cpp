// The memory timeline (memory/timeline, Note [memory timeline]): real runs write
// per-phase samples of the tracking allocator's categories.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "test_util.h"

using namespace strata::test;

namespace {

double total(const nlohmann::json& bytes) {
  double t = 0;
  for (auto& [k, v] : bytes.items()) t += v.get<double>();
  return t;
}

}  // namespace

TEST(MemoryTimeline, ZeroThreeRunRecordsEveryPhase) {
  const std::string dir = temp_dir("timeline-zero3");
  auto r = run(train_command(dir,
                             "--nproc 2 --training.steps=3 --training.batch_size=8 "
                             "--parallel.zero=3 --logging.memory_timeline_steps=2"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto samples = read_metrics(dir + "/memory_timeline.jsonl");
  ASSERT_FALSE(samples.empty());
  std::set<std::string> phases;
  double prev_t = -1, max_total = 0;
  for (const auto& s : samples) {
    EXPECT_LE(s["step"].get<int>(), 2) << "only the first two steps are recorded";
    if (s["step"] != 1) continue;
    EXPECT_GE(s["t_ms"].get<double>(), prev_t);
    prev_t = s["t_ms"].get<double>();
    phases.insert(s["phase"].get<std::string>());
    max_total = std::max(max_total, total(s["bytes"]));
  }
  for (int b = 0; b < 4; ++b)
    for (const char* p : {"].forward.begin", "].forward.end", "].backward.begin"})
      EXPECT_TRUE(phases.count("block[" + std::to_string(b) + p)) << b << p;
  for (const char* p : {"step.begin", "micro[0].loss", "micro[0].backward.end", "optimizer.begin",
                        "optimizer.end", "step.end", "zero.all_gather.done unit 0",
                        "zero.free unit 0", "zero.reduce.launch group 0"})
    EXPECT_TRUE(phases.count(p)) << p;
  auto at = [&](const std::string& phase) {
    for (const auto& s : samples)
      if (s["phase"] == phase) return s["bytes"];
    return nlohmann::json();
  };
  // A block runs with its parameters gathered (communication buffers) and the
  // activations grow through the forward; after backward nothing transient remains.
  EXPECT_GT(at("block[1].forward.begin")["comm_buffers"].get<double>(), 0);
  EXPECT_GT(at("micro[0].loss")["activations"].get<double>(),
            at("block[0].forward.begin")["activations"].get<double>());
  EXPECT_EQ(at("step.end")["activations"].get<double>(), 0);
  // The backend thread lets go of the last reduction's buffer a moment after the
  // wait returns, so "nothing left" is checked at the next step's start.
  for (const auto& s : samples)
    if (s["step"] == 2 && s["phase"] == "step.begin")
      EXPECT_EQ(s["bytes"]["comm_buffers"].get<double>(), 0);
  // Samples are moments inside the step: never above its measured peak.
  const auto metrics = read_metrics(dir + "/metrics.jsonl");
  EXPECT_LE(max_total, metrics[0]["mem_peak_total"].get<double>());
}

TEST(MemoryTimeline, DdpMarksReductionsAndZeroStepsTurnItOff) {
  const std::string dir = temp_dir("timeline-ddp");
  auto r = run(train_command(dir,
                             "--nproc 2 --training.steps=3 --training.batch_size=8 "
                             "--logging.memory_timeline_steps=2"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto samples = read_metrics(dir + "/memory_timeline.jsonl");
  std::set<int> steps;
  int reductions = 0;
  for (const auto& s : samples) {
    steps.insert(s["step"].get<int>());
    reductions += s["phase"].get<std::string>().rfind("ddp.reduce.launch", 0) == 0;
  }
  EXPECT_EQ(steps, (std::set<int>{1, 2}));
  EXPECT_GT(reductions, 0);
  const std::string off = temp_dir("timeline-off");
  r = run(train_command(off,
                        "--training.steps=1 --training.batch_size=4 "
                        "--logging.memory_timeline_steps=0"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(off + "/memory_timeline.jsonl"));
  expect_one_error_line(train_command(off, "--logging.memory_timeline_steps=-1"),
                        "error: logging.memory_timeline_steps=-1 must be >= 0");
}
