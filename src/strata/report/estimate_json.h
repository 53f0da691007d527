#pragma once
#include <nlohmann/json.hpp>

#include "strata/train/planned_estimate.h"

namespace strata {

// `strata estimate --json`: the prediction, category by category and phase by phase.
nlohmann::json estimate_json(const PlannedEstimate& pe);
// Predicted vs measured, per category at the peak and each category's own peak.
nlohmann::json compare_json(const PlannedEstimate& pe, const nlohmann::json& measured_step);

}  // namespace strata
