#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/parallel/pipeline/schedule.h"

namespace strata {

// Note [schedule simulation]: runs a schedule on a model of the machine in which each
// rank executes its list in order, a compute action takes cost(rank, action), a send
// takes cost too (0 by default) and never blocks, and a receive waits for its
// matching send (the n-th receive on a channel matches the n-th send). It finds
// deadlocks (a rank waiting for a send that never comes), the step time, the bubble
// (idle share of every rank's step) and each action's start and end for a Gantt chart.
// With measured per-action durations it predicts a real step.
struct TimedAction {
  Action action;
  double start = 0, end = 0;
};
struct Simulation {
  std::string error;  // non-empty: the schedule deadlocks (names the waiting ranks)
  double step_time = 0;
  double bubble_fraction = 0;                      // 1 - busy / (ranks x step_time)
  std::vector<double> busy;                        // per rank: compute time
  std::vector<std::vector<TimedAction>> timeline;  // per rank, in list order
};
using ActionCost = std::function<double(int64_t rank, const Action& action)>;
Simulation simulate_schedule(const std::vector<StageActions>& schedule, const ActionCost& cost);

// Note [shared-machine simulation]: ranks that share a machine's cores (a CPU run)
// compute more slowly the more of them compute at once, and a pipeline's number
// computing changes through the step: one in GPipe's fill with few micro-batches, all
// of them in 1F1B's steady state. Each action is its compute (seconds at full speed)
// then a fixed part (its collectives, a send's transfer); while k ranks compute, each
// runs at 1 / slowdown(k) of full speed. Otherwise as simulate_schedule, which is the
// case slowdown = 1.
struct ActionWork {
  double compute = 0, fixed = 0;
};
using ActionWorkFn = std::function<ActionWork(int64_t rank, const Action& action)>;
using SlowdownFn = std::function<double(double computing)>;
Simulation simulate_shared(const std::vector<StageActions>& schedule, const ActionWorkFn& work,
                           const SlowdownFn& slowdown);

// Unit costs of a whole-model pass split over chunks: forward 1, backward 2 (input 1
// and weight 1 when split), each divided by chunks; messages free.
ActionCost unit_costs(int64_t chunks = 1, double forward = 1, double backward_input = 1,
                      double backward_weight = 1);

// A text grid of a simulated schedule: one row per rank, one column per time unit
// (each unit labelled by the action running in it, "." idle), for `strata schedule`.
std::string schedule_grid(const Simulation& sim, double unit);

// A compute action's kind as traces and charts name it: forward, backward,
// backward-input, backward-weight (sends and receives: communication).
const char* action_category(ActionType type);

// A Chrome trace-event document (Perfetto and chrome://tracing open it) of per-rank
// timelines in seconds: one complete event ("ph": "X") per compute action, a track
// per rank (tid), named like the grid ("0F3"), categorised forward / backward /
// backward-input / backward-weight, with its micro-batch and chunk as arguments.
nlohmann::json chrome_trace(const std::vector<std::vector<TimedAction>>& timelines);

// chrome_trace's inverse: per rank (tid), the compute actions of a trace-event
// document in seconds, in start order (what `strata schedule --costs` reads from a
// run's trace.json). Events it did not write are skipped.
std::vector<std::vector<TimedAction>> timelines_from_trace(const nlohmann::json& trace);

// Each compute action's measured duration (end - start) on its rank; NaN for an action
// the timelines do not hold, so a caller can name what is missing.
ActionCost measured_costs(const std::vector<std::vector<TimedAction>>& timelines);

}  // namespace strata
