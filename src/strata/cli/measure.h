#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Trains with `strata train` over `nproc` local ranks for `steps` steps (synthetic data
// unless the arguments say otherwise), its log silenced, and returns the median
// step_ms / 1e3 of the steps after `warmup`; one error line when the run fails. Used by
// calibrate's reference run (Note [step calibration]) and plan's --run-top.
double measured_step_seconds(const std::string& self_exe, int64_t nproc,
                             const std::vector<std::string>& args, int64_t steps, int64_t warmup);

}  // namespace strata
