#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Trains with `strata train` over `nproc` local ranks for `steps` steps (synthetic data
// unless the arguments say otherwise), its log silenced, and returns step_ms / 1e3 of
// each step after `warmup`; one error line when the run fails. Used by calibrate's
// reference run (Note [step calibration]) and plan's --run-top.
std::vector<double> measured_step_times(const std::string& self_exe, int64_t nproc,
                                        const std::vector<std::string>& args, int64_t steps,
                                        int64_t warmup);
// Each measured step's time and, beside it, its time in the tp axis's collectives (the
// run's own comm timers; 0 without tensor parallelism), seconds.
struct MeasuredSteps {
  std::vector<double> step_s, tp_comm_s;
};
MeasuredSteps measured_steps(const std::string& self_exe, int64_t nproc,
                             const std::vector<std::string>& args, int64_t steps, int64_t warmup);
// Of several runs, the one whose median step is fastest (Note [step calibration, spread
// runs]); runs must not be empty.
const MeasuredSteps& fastest_measured(const std::vector<MeasuredSteps>& runs);
// The median of those.
double measured_step_seconds(const std::string& self_exe, int64_t nproc,
                             const std::vector<std::string>& args, int64_t steps, int64_t warmup);

struct ReferenceRun;
// The `strata train` overrides of the calibration's reference run r (Note [step
// calibration]) at `threads` per rank.
std::vector<std::string> reference_args(const ReferenceRun& r, int64_t threads);
// Its steps: 8 of them, the first 2 warm-up (allocation, the threads' start).
MeasuredSteps reference_steps(const ReferenceRun& r, int64_t threads, const std::string& self_exe);

}  // namespace strata
