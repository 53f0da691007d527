#pragma once
#include <map>
#include <string>

#include "strata/plan/cost_model.h"
#include "strata/report/run_record.h"
#include "strata/train/planned_estimate.h"

namespace strata {

// Note [step time in the report]: `strata report` puts the cost model's step (Note
// [cost model]) for the run's layout, on this machine's calibrated profile, next to
// the step the run measured, term by term where the run's metrics have one: forward +
// backward, tensor-, pipeline- and data-parallel communication, the optimizer. Measured
// figures are medians over the steps after the first (its warm-up); a collective's
// measured time is how long it took, overlapped or not, where the prediction counts
// what is exposed. On a calibrated CPU profile the model's parts are timed at the run's
// micro-batch first, as `strata plan` does (Note [measured parts]).
struct StepTimeComparison {
  std::string profile;  // the profile's path; empty when there is no prediction
  std::string why_not;  // why not, in one line
  StepPrediction predicted;
  double step_ms = 0, fwd_bwd_ms = 0, optim_ms = 0;
  std::map<std::string, double> comm_ms;  // by mesh axis ("dp", "tp", "pp")
  bool parts_timed = false;               // the prediction's parts were timed here
  std::string caution;  // why the prediction may not hold (Note [profile threads]); one line
  bool has_prediction() const { return why_not.empty(); }
};
// profile_path empty: this machine's default for the run's threads per rank.
StepTimeComparison compare_step_time(const RunRecord& run, const PlannedEstimate& est,
                                     const std::string& profile_path = "");
std::string step_time_section(const StepTimeComparison& c);

}  // namespace strata
