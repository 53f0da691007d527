// `strata report`: the SVG helpers (pure), and a real run's report opened in
// headless Chromium (Debian's chromium package; scripts/setup.sh installs it).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "strata/core/files.h"
#include "strata/report/step_time.h"
#include "strata/report/svg.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

TEST(ReportSvg, NiceStepsAndEscaping) {
  EXPECT_DOUBLE_EQ(nice_step(0, 100, 5), 20);
  EXPECT_DOUBLE_EQ(nice_step(0, 7, 5), 2);
  EXPECT_DOUBLE_EQ(nice_step(0, 0.03, 3), 0.01);
  EXPECT_DOUBLE_EQ(nice_step(5, 5, 5), 1);  // an empty range still gets a step
  EXPECT_EQ(html_escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
}

TEST(ReportSvg, StackedAreasStackInOrder) {
  ChartSpec c;
  c.title = "t<1>";
  c.hlines = {{10, "peak", "#c00", false}};
  c.markers = {{1, "micro[0].loss"}};
  const std::string svg = stacked_area_chart(
      c, {{"low", "#111", {0, 1, 2}, {1, 2, 3}}, {"high", "#222", {0, 1, 2}, {4, 4, 4}}});
  // One filled path per layer, the title escaped, the marker and line drawn.
  EXPECT_EQ(std::count(svg.begin(), svg.end(), 'Z'), 2);
  EXPECT_NE(svg.find("t&lt;1&gt;"), std::string::npos);
  EXPECT_NE(svg.find("<title>micro[0].loss</title>"), std::string::npos);
  EXPECT_NE(svg.find(">peak</text>"), std::string::npos);
  // The top of the stack (3 + 4 = 7) stays under the 10 MiB line: the axis spans 10.
  EXPECT_NE(svg.find(">10</text>"), std::string::npos);
}

TEST(Report, RunReportOpensInHeadlessChromium) {
  const std::string dir = temp_dir("report");
  RunResult r = run(train_command(dir, "-c " + source_dir() +
                                           "/configs/kjv-debug.toml --nproc 2 --parallel.zero=2 "
                                           "--training.steps=6 --training.eval_interval=3 "
                                           "--checkpoint.interval=0 --checkpoint.save_final=false "
                                           "--training.threads=1"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(strata_bin() + " report " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string html_path = dir + "/report.html";
  ASSERT_TRUE(std::filesystem::exists(html_path)) << r.output;
  std::stringstream ss;
  ss << std::ifstream(html_path).rdbuf();
  const std::string html = ss.str();
  // Self-contained: no scripts, no links or sources that would fetch anything.
  for (const char* banned : {"<script", "src=", "href=", "@import", "url("})
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
  std::smatch m;
  std::string rest = html;
  while (std::regex_search(rest, m, std::regex("https?://[^\"]*"))) {
    EXPECT_EQ(m.str(), "http://www.w3.org/2000/svg");  // the SVG namespace name only
    rest = m.suffix();
  }
  // The parts the issue asks for.
  for (const char* part : {"Measured: tracked bytes by category", "Predicted: one step",
                           "measured peak", "predicted peak", "Loss", "eval loss", "Throughput",
                           "Collective time per step", "Step time", "Resolved config", "zero = 2"})
    EXPECT_NE(html.find(part), std::string::npos) << part;

  // Chromium loads it: the DOM comes back with every chart, and the console and
  // network logs have no errors.
  r =
      run("chromium --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 "
          "--dump-dom file://" +
              html_path + " 2>" + dir + "/chromium.log",
          120);
  ASSERT_EQ(r.status, 0) << "chromium failed (is the Debian chromium package installed?)\n"
                         << r.output;
  int svgs = 0;
  for (size_t p = r.output.find("<svg"); p != std::string::npos; p = r.output.find("<svg", p + 1))
    ++svgs;
  EXPECT_GE(svgs, 5) << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find("Strata run report"), std::string::npos);
  std::stringstream log;
  log << std::ifstream(dir + "/chromium.log").rdbuf();
  for (const char* bad : {"CONSOLE", "Uncaught", "net::ERR", "Failed to load"})
    EXPECT_EQ(log.str().find(bad), std::string::npos) << bad << "\n" << log.str();
}

TEST(Report, BadRunDirectoryIsOneErrorLine) {
  const std::string dir = temp_dir("report-bad");
  expect_one_error_line(strata_bin() + " report " + dir + "/missing", "does not exist");
  expect_one_error_line(strata_bin() + " report " + dir, "is not a run directory");
}

TEST(Report, StepTimeSetsThePredictionBesideTheRun) {
  // A tp=2 run of the debug GPT and a hand-made profile: the section has the cost
  // model's step and terms beside the run's medians (the tp collectives measured on
  // their axis); without a profile it says how to make one.
  const std::string dir = temp_dir("report-step");
  RunResult r = run(train_command(dir,
                                  "--model.flavour=debug --data.source=synthetic --nproc 2 "
                                  "--parallel.tp=2 --training.batch_size=4 "
                                  "--training.steps=4 --training.eval_interval=0 "
                                  "--checkpoint.save_final=false --training.threads=1"));
  ASSERT_EQ(r.status, 0) << r.output;
  const RunRecord rec = read_run(dir);
  const PlannedEstimate est = plan_and_estimate(rec.config, 0);
  HardwareProfile hw;
  hw.name = "flat";
  hw.gemm["fp32"] = {{1, 1e-12}, {1e15, 1e3}};
  hw.memory_bytes_per_s = 1e10;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"})
    hw.collectives[op][2] = {1e-4, 1e9};
  const std::string path = dir + "/flat.json";
  write_file_atomic(path, profile_json(hw).dump());
  const StepTimeComparison c = compare_step_time(rec, est, path);
  ASSERT_TRUE(c.has_prediction()) << c.why_not;
  EXPECT_GT(c.predicted.step_s, 0);
  EXPECT_GT(c.predicted.tp_comm_s, 0);
  EXPECT_GT(c.step_ms, 0);
  EXPECT_GT(c.comm_ms.at("tp"), 0);
  const std::string html = step_time_section(c);
  for (const char* part :
       {"predicted ms", "measured ms", "tensor-parallel communication", "flat.json"})
    EXPECT_NE(html.find(part), std::string::npos) << part;
  EXPECT_EQ(html.find("Caution"), std::string::npos) << "the run's threads are the profile's";
  // A profile calibrated at another number of threads per rank (Note [profile threads]):
  // still predicted, with a caution that says so.
  hw.threads = 2;
  write_file_atomic(path, profile_json(hw).dump());
  const StepTimeComparison other = compare_step_time(rec, est, path);
  ASSERT_TRUE(other.has_prediction()) << other.why_not;
  EXPECT_NE(step_time_section(other).find("Caution:</b> the profile was calibrated at 2 thread"),
            std::string::npos)
      << step_time_section(other);
  const StepTimeComparison none = compare_step_time(rec, est, dir + "/missing.json");
  EXPECT_FALSE(none.has_prediction());
  EXPECT_NE(none.why_not.find("run strata calibrate --nproc 2"), std::string::npos) << none.why_not;
  EXPECT_NE(step_time_section(none).find("No prediction"), std::string::npos);
}
