#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// `strata plan -c CONFIG --nproc N`: every layout of N ranks that starts for the config's
// model and global batch (Note [layout space]), those whose estimated peak fits the
// device memory (with the estimator's margin, Note [fit margin]), ranked by the cost
// model's predicted step (Note [cost model]) on a hardware profile (Note [hardware
// profile]: this machine's from `strata calibrate`, or --profile FILE).
struct PlanArgs {
  std::string config_path;
  std::vector<std::string> overrides;  // --section.key=value
  int64_t nproc = 0;
  std::string device_memory;  // "80GiB"; default: the profile's, else no limit
  std::string profile;        // default: this machine's calibrated profile
  int64_t top = 10;
  bool json = false;
  // Layout keys held at the config's value (parallel.tp, memory.recompute, ...).
  std::vector<std::string> fix;
  // Train the first K predicted for a few steps each and rank them by measurement too.
  int64_t run_top = 0;
  int64_t run_steps = 6;
  // On a calibrated CPU profile the model's parts are timed here (Note [measured
  // parts]) and the calibration's reference is run to take the machine's speed now
  // (Note [the machine now]); this prices from the profile alone.
  bool no_measure = false;
  // "F" or "F,C": the machine's speed now and its collectives' (Note [the machine's
  // collectives now]) as an earlier plan printed them, in place of the runs that take
  // them; empty: take them (unless no_measure).
  std::string machine_now;
};
int run_plan(const PlanArgs& a, const std::string& self_exe = "");

}  // namespace strata
