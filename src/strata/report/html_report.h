#pragma once
#include <optional>
#include <string>

#include "strata/report/run_record.h"
#include "strata/report/step_time.h"
#include "strata/train/planned_estimate.h"

namespace strata {

// Note [self-contained report]: `strata report RUN_DIR` writes one HTML file with
// everything inline (CSS and SVG; no scripts, fonts or images from anywhere), so
// it opens offline, attaches to a ticket and archives with the run. Sections:
// the memory timeline as stacked areas by category with phase markers, the
// measured peak next to the estimator's prediction (and the predicted step by
// phase), predicted vs measured per category, loss and throughput curves,
// communication time per step, the predicted step against the measured one term by
// term (Note [step time in the report]), and the resolved config.
std::string render_report(const RunRecord& run, const std::optional<PlannedEstimate>& estimate,
                          const std::string& estimate_error,
                          const std::optional<StepTimeComparison>& step_time = std::nullopt);

// Reads RUN_DIR, estimates its config (a failure is shown in the report, not
// fatal), writes the HTML atomically to output (default RUN_DIR/report.html) and
// prints its path.
int run_report(const std::string& run_dir, const std::string& output);

}  // namespace strata
