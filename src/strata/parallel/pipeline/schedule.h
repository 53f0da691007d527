#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Note [schedules are data]: a schedule is, per stage, the list of actions that stage
// runs in order; one executor runs any of them and tests check them as lists. A stage
// that is the whole model (pp=1) has the degenerate schedule: forward and backward
// of each micro-batch in turn, so one micro-batch's activations are alive at a time.
// Send/Recv and split backward arrive with pipeline parallelism.
enum class ActionType { kForward, kBackward };

struct Action {
  ActionType type;
  int64_t micro = 0;  // micro-batch
  int64_t chunk = 0;  // model part (virtual stage) of this rank
  bool operator==(const Action&) const = default;
  // "0F3": chunk 0, forward, micro-batch 3 (PyTorch pipelining's notation).
  std::string to_string() const;
};
using StageActions = std::vector<Action>;

// pp = 1: F0 B0 F1 B1 ... for micro_batches micro-batches (one stage's list).
std::vector<StageActions> single_stage_schedule(int64_t micro_batches);

// What check_schedule found: an empty error when every micro-batch of every chunk is
// run forward once, then backward once, and the largest number of micro-batches
// whose activations a stage holds at once.
struct ScheduleCheck {
  std::string error;
  int64_t max_in_flight = 0;
};
ScheduleCheck check_schedule(const std::vector<StageActions>& schedule, int64_t micro_batches,
                             int64_t chunks = 1);

}  // namespace strata
