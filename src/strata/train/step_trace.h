#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "strata/distributed/comm.h"
#include "strata/parallel/pipeline/simulate.h"

namespace strata {

// Note [step timeline]: every step the executor records when each compute action of
// this rank started and ended (seconds from the rank's step start; receives waited
// before the clock starts, so a wait shows as the gap before the compute). The
// trainer gathers the pp group's timelines after the step (one small all-gather of
// fixed size: every rank runs the same number of compute actions) and derives
//  - the measured bubble: 1 - sum of busy time / (p x the longest span), the share of
//    the step's p rank-timelines spent idle, as simulate_schedule defines it; and
//  - at logging.trace_step, trace.json (chrome_trace of every stage) for Perfetto and
//    the Gantt chart of `strata report`.
// The ranks' clocks are aligned at each one's step start (they leave the previous
// step's collectives within a fraction of a millisecond of each other).
struct StepTimeline {
  std::vector<std::vector<TimedAction>> ranks;  // per pp rank: its compute actions
  std::vector<double> span;                     // per pp rank: the executor's seconds
};

// All-gathers the pp group's compute timelines (pp of size 1: only this rank's).
StepTimeline gather_step_timeline(Comm& pp, const std::vector<TimedAction>& mine, double span_s);

// {"bubble", "busy_ms" per rank, "span_ms" per rank, "predicted_ms"}: the metrics
// record's "pp" entry. predicted_ms is the step simulate_schedule gives `schedule` (every
// rank's list) with this step's measured action durations (Note [schedule simulation]),
// to set beside the longest span.
nlohmann::json step_timeline_json(const StepTimeline& t, const std::vector<StageActions>& schedule);

}  // namespace strata
