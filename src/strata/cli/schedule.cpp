#include "strata/cli/schedule.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include <c10/util/StringUtil.h>

#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/parallel/pipeline/schedule.h"
#include "strata/parallel/pipeline/simulate.h"

namespace strata {

double theoretical_bubble(const std::string& schedule, int64_t p, int64_t m, int64_t v) {
  const auto idle = static_cast<double>(p - 1);
  const ScheduleKind kind = parse_schedule_kind(schedule);
  const double work = kind == ScheduleKind::kInterleaved ? static_cast<double>(v * m)
                      : kind == ScheduleKind::kZbH1      ? static_cast<double>(3 * m)
                                                         : static_cast<double>(m);
  return idle / (work + idle);
}

namespace {
// Measured durations from a run's trace.json, checked to cover every compute action.
ActionCost costs_from(const ScheduleArgs& a, const std::vector<StageActions>& s) {
  std::ifstream in(a.costs);
  STRATA_CHECK(in, "--costs ", a.costs, " cannot be read; give the trace.json of a run ",
               "(logging.trace_step)");
  const auto trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  STRATA_CHECK(!trace.is_discarded(), "--costs ", a.costs, " is not JSON; give a run's trace.json");
  const auto timelines = timelines_from_trace(trace);
  ActionCost cost = measured_costs(timelines);
  for (size_t r = 0; r < s.size(); ++r)
    for (const Action& act : s[r])
      STRATA_CHECK(!act.is_compute() || std::isfinite(cost(static_cast<int64_t>(r), act)),
                   "--costs ", a.costs, " has no duration for stage ", r, "'s ", act.to_string(),
                   "; give the trace of a run with the same --pp, --microbatches, --schedule and "
                   "--virtual");
  return cost;
}
}  // namespace

int run_schedule(const ScheduleArgs& a) {
  const ScheduleKind kind = parse_schedule_kind(a.schedule);
  const auto s = pipeline_schedule(kind, a.pp, a.micro_batches, a.chunks);
  const ScheduleCheck check = check_schedule(s, a.micro_batches, a.chunks);
  const bool measured = !a.costs.empty();
  const Simulation sim = simulate_schedule(s, measured ? costs_from(a, s) : unit_costs(a.chunks));
  // A schedule this program makes is valid by construction; say so if it is not.
  const std::string problem = !check.error.empty() ? check.error : sim.error;
  if (!problem.empty()) {
    std::fprintf(stderr, "error: internal: %s schedule is broken: %s\n", a.schedule.c_str(),
                 problem.c_str());
    return 1;
  }
  if (measured) {
    // Seconds in the trace; the prediction in milliseconds.
    std::string busy;
    for (size_t r = 0; r < sim.busy.size(); ++r)
      busy += c10::str(r ? ", " : "", c10::str(std::llround(sim.busy[r] * 1e4) / 10.0));
    std::printf("%s, pp=%lld, %lld micro-batches, with the durations measured in %s:\n",
                a.schedule.c_str(), static_cast<long long>(a.pp),
                static_cast<long long>(a.micro_batches), a.costs.c_str());
    std::printf("predicted step %.2f ms, bubble %.1f%% (busy ms per stage: %s)\n",
                sim.step_time * 1e3, 100 * sim.bubble_fraction, busy.c_str());
    if (!a.trace.empty()) {
      write_file_atomic(a.trace, chrome_trace(sim.timeline).dump());
      std::printf("trace (Perfetto, chrome://tracing): %s\n", a.trace.c_str());
    }
    return 0;
  }
  std::printf("%s, pp=%lld, %lld micro-batches%s; forward 1, backward 2 (input 1 + weight 1)%s\n",
              a.schedule.c_str(), static_cast<long long>(a.pp),
              static_cast<long long>(a.micro_batches),
              a.chunks > 1 ? c10::str(", ", a.chunks, " chunks per rank").c_str() : "",
              a.chunks > 1 ? c10::str(", each chunk 1/", a.chunks).c_str() : "");
  std::printf("%s", schedule_grid(sim, 1.0 / static_cast<double>(a.chunks)).c_str());
  const double theory = theoretical_bubble(a.schedule, a.pp, a.micro_batches, a.chunks);
  std::printf("step %.4g, bubble %.1f%% of the step (theory %.1f%%)\n", sim.step_time,
              100 * sim.bubble_fraction, 100 * theory);
  std::string held;
  for (size_t r = 0; r < check.in_flight.size(); ++r)
    held += c10::str(r ? ", " : "", check.in_flight[r]);
  std::printf("micro-batches held at once per rank: %s\n", held.c_str());
  if (!a.trace.empty()) {
    // One time unit drawn as one millisecond.
    std::vector<std::vector<TimedAction>> ms = sim.timeline;
    for (auto& rank : ms)
      for (TimedAction& t : rank) {
        t.start /= 1000;
        t.end /= 1000;
      }
    write_file_atomic(a.trace, chrome_trace(ms).dump());
    std::printf("trace (Perfetto, chrome://tracing): %s\n", a.trace.c_str());
  }
  return 0;
}

}  // namespace strata
