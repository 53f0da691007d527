#include "strata/cli/measure.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "strata/core/errors.h"
#include "strata/core/stats.h"
#include "strata/distributed/launcher.h"
#include "strata/plan/reference_fit.h"
#include "strata/report/run_record.h"

namespace fs = std::filesystem;

namespace strata {

MeasuredSteps measured_steps(const std::string& self_exe, int64_t nproc,
                             const std::vector<std::string>& args, int64_t steps, int64_t warmup) {
  STRATA_CHECK(steps > warmup, "a measured run needs more steps (", steps, ") than warm-up (",
               warmup, ")");
  static int serial = 0;
  const fs::path dir = fs::temp_directory_path() / ("strata-measure-" + std::to_string(getpid()) +
                                                    "-" + std::to_string(serial++));
  struct RemoveDir {  // however this returns, the run's directory goes
    fs::path path;
    ~RemoveDir() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } remove_dir{dir};
  LaunchOptions lo;
  lo.nproc_per_node = nproc;
  lo.master_port = "auto";
  lo.command = {self_exe, "train", "--data.source=synthetic"};
  lo.command.insert(lo.command.end(), args.begin(), args.end());
  for (const std::string& a :
       {"--training.steps=" + std::to_string(steps), std::string("--training.eval_interval=0"),
        std::string("--checkpoint.save_final=false"), std::string("--logging.progress=off"),
        "--logging.run_dir=" + dir.string()})
    lo.command.push_back(a);
  // Its log would bury the caller's own lines: the ranks inherit a silenced stdout.
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY);
  dup2(null, STDOUT_FILENO);
  const int rc = launch(lo);
  dup2(saved, STDOUT_FILENO);
  close(saved), close(null);
  MeasuredSteps out;
  if (rc == 0 && fs::exists(dir / "metrics.jsonl"))
    for (const auto& j : read_jsonl(dir / "metrics.jsonl")) {
      if (j.value("step", int64_t{0}) <= warmup) continue;
      out.step_s.push_back(j["step_ms"].get<double>() / 1e3);
      const auto axes = j.value("comm_axes", nlohmann::json::object());
      const auto tp = axes.value("tp", nlohmann::json::object());
      out.tp_comm_s.push_back(tp.value("ms", 0.0) / 1e3);
    }
  STRATA_CHECK(rc == 0, "a measured training run on ", nproc,
               " ranks failed (its errors are above); check that strata train runs with it");
  STRATA_CHECK(!out.step_s.empty(), "a measured training run on ", nproc, " ranks logged no steps");
  return out;
}

const MeasuredSteps& fastest_measured(const std::vector<MeasuredSteps>& runs) {
  STRATA_CHECK(!runs.empty(), "no measured run to choose from");
  std::vector<std::vector<double>> steps;
  for (const auto& r : runs) steps.push_back(r.step_s);
  return runs[std::min(fastest_run_index(steps), runs.size() - 1)];
}

std::vector<double> measured_step_times(const std::string& self_exe, int64_t nproc,
                                        const std::vector<std::string>& args, int64_t steps,
                                        int64_t warmup) {
  return measured_steps(self_exe, nproc, args, steps, warmup).step_s;
}

double measured_step_seconds(const std::string& self_exe, int64_t nproc,
                             const std::vector<std::string>& args, int64_t steps, int64_t warmup) {
  return median(measured_step_times(self_exe, nproc, args, steps, warmup));
}

std::vector<std::string> reference_args(const ReferenceRun& r, int64_t threads) {
  return {"--model.flavour=debug",
          "--parallel.dp=" + std::to_string(r.dp()),
          "--parallel.tp=" + std::to_string(r.tp),
          "--parallel.pp=" + std::to_string(r.pp),
          "--parallel.pp_schedule=1f1b",
          "--parallel.zero=" + std::to_string(r.zero),
          "--training.batch_size=" + std::to_string(r.batch()),
          "--training.micro_batch_size=" + std::to_string(r.micro),
          "--training.threads=" + std::to_string(threads)};
}

MeasuredSteps reference_steps(const ReferenceRun& r, int64_t threads, const std::string& self_exe) {
  return measured_steps(self_exe, r.ranks, reference_args(r, threads), 8, 2);
}

}  // namespace strata
