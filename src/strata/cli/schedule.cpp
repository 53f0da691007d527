#include "strata/cli/schedule.h"

#include <cstdio>

#include <c10/util/StringUtil.h>

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

int run_schedule(const ScheduleArgs& a) {
  const ScheduleKind kind = parse_schedule_kind(a.schedule);
  const auto s = pipeline_schedule(kind, a.pp, a.micro_batches, a.chunks);
  const ScheduleCheck check = check_schedule(s, a.micro_batches, a.chunks);
  const Simulation sim = simulate_schedule(s, unit_costs(a.chunks));
  // A schedule this program makes is valid by construction; say so if it is not.
  const std::string problem = !check.error.empty() ? check.error : sim.error;
  if (!problem.empty()) {
    std::fprintf(stderr, "error: internal: %s schedule is broken: %s\n", a.schedule.c_str(),
                 problem.c_str());
    return 1;
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
