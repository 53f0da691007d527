#include "strata/report/estimate_json.h"

#include <cmath>

#include "strata/train/metrics.h"

namespace strata {

nlohmann::json estimate_json(const PlannedEstimate& pe) {
  const auto& e = pe.estimate;
  nlohmann::json j = {{"model", pe.input.spec.flavour},
                      {"parameters", e.count.total},
                      {"layout", pe.plan.dims.to_string()},
                      {"peak", std::llround(e.peak.total())},
                      {"peak_phase", e.peak.phase},
                      {"at_peak", category_json(e.peak.bytes)},
                      {"category_peak", category_json(e.category_peak)},
                      {"activations_per_micro_batch", std::llround(e.activations_per_micro_batch)},
                      {"micro_batches_in_flight", e.micro_batches_in_flight},
                      {"micro_batches_awaiting_weight", e.micro_batches_awaiting_weight},
                      {"deferred_per_micro_batch", std::llround(e.deferred_per_micro_batch)},
                      {"host_bytes", std::llround(e.host_bytes)},
                      {"notes", e.notes}};
  if (is_language_model(pe.input.spec.family)) {
    const LayerActivationCheck k = compare_with_korthikanti(pe.input.spec, pe.input.micro_batch);
    j["layer_vs_korthikanti"] = {{"strata", std::llround(k.strata)},
                                 {"korthikanti", std::llround(k.korthikanti)},
                                 {"explanation", k.explanation}};
  }
  nlohmann::json tl = nlohmann::json::array();
  for (const auto& p : e.timeline)
    tl.push_back({{"phase", p.phase}, {"bytes", category_json(p.bytes)}});
  j["timeline"] = tl;
  return j;
}

nlohmann::json compare_json(const PlannedEstimate& pe, const nlohmann::json& m) {
  const auto& e = pe.estimate;
  const CategoryBytes at = category_bytes(m["mem_at_peak"]);
  const CategoryBytes own = category_bytes(m["mem_peak"]);
  const double measured = m["mem_peak_total"].get<double>();
  nlohmann::json rows = nlohmann::json::array();
  for (size_t c = 0; c < kNumCategories; ++c) {
    rows.push_back({{"category", category_name(static_cast<Category>(c))},
                    {"predicted_at_peak", std::llround(e.peak.bytes[c])},
                    {"measured_at_peak", at[c]},
                    {"predicted_peak", std::llround(e.category_peak[c])},
                    {"measured_peak", own[c]}});
  }
  return {{"step", m.value("step", 0)},
          {"predicted", std::llround(e.peak.total())},
          {"measured", static_cast<int64_t>(measured)},
          {"error", measured > 0 ? (e.peak.total() - measured) / measured : 0.0},
          {"peak_phase", e.peak.phase},
          {"categories", rows}};
}

}  // namespace strata
