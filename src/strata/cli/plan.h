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
};
int run_plan(const PlanArgs& a);

// Where `strata calibrate` keeps this machine's profile for `threads` per rank.
std::string default_profile_path(int64_t threads);

}  // namespace strata
