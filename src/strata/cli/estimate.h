#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/report/estimate_json.h"

namespace strata {

// `strata estimate`: the per-rank memory of a config, without running it.
struct EstimateArgs {
  std::string config_path;
  std::vector<std::string> overrides;  // --section.key=value
  int64_t nproc = 0;                   // world size; 0: dp * tp * pp
  std::string device_memory;           // "80GiB": say whether the peak fits
  std::string compare_dir;             // a run directory: predicted vs measured
  bool json = false;
};
int run_estimate(const EstimateArgs& args);

// "80GiB", "80GB", "512MiB", "1.5e9" (bytes) -> bytes; one error line otherwise.
int64_t parse_size(const std::string& text);
// The number `text` starts with, into `value`, and how many characters it takes (0:
// it starts with none).
size_t leading_number(const std::string& text, double& value);

// Note [fit margin]: the estimate's error against measurement is bounded by 8%
// (the matrix test); FITS is said only when the predicted peak plus that margin is
// within the limit, so a FITS is never contradicted by a run inside the bound.
constexpr double kFitMargin = 0.08;
struct FitVerdict {
  bool fits = false;
  double needed = 0;  // predicted peak x (1 + margin)
  double slack = 0;   // limit - needed (negative: short by)
};
FitVerdict fit_verdict(double predicted_peak, double limit);

}  // namespace strata
