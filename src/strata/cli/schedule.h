#pragma once
#include <cstdint>
#include <string>

namespace strata {

// `strata schedule`: a pipeline schedule's step x rank grid and its bubble, from the
// unit-cost simulation (Note [schedule simulation]), without training.
struct ScheduleArgs {
  int64_t pp = 2;
  int64_t micro_batches = 4;
  std::string schedule = "1f1b";
  int64_t chunks = 1;  // --virtual
  std::string trace;   // a Chrome trace-event file of the simulated step (empty: none)
  // A run's trace.json: simulate with its measured action durations instead of unit
  // costs (Note [schedule simulation]), to predict the step the run measured.
  std::string costs;
};
int run_schedule(const ScheduleArgs& args);

// The bubble the schedule's theory gives, as a share of the step, with a forward of
// 1, an input gradient 1 and a weight gradient 1 (a full backward 2): (p-1)/(m+p-1)
// for gpipe and 1f1b, (p-1)/(vm+p-1) for interleaved, (p-1)/(3m+p-1) for zb-h1. Pure.
double theoretical_bubble(const std::string& schedule, int64_t p, int64_t m, int64_t v);

}  // namespace strata
