#include "strata/cli/estimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "strata/core/errors.h"
#include "strata/report/estimate_json.h"
#include "strata/report/run_record.h"
#include "strata/train/metrics.h"

namespace strata {

size_t leading_number(const std::string& text, double& value) {
  size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  return used;
}

int64_t parse_size(const std::string& text) {
  double v = 0;
  const size_t pos = leading_number(text, v);
  std::string unit = text.substr(pos);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  double mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kb")
    mult = 1e3;
  else if (unit == "m" || unit == "mb")
    mult = 1e6;
  else if (unit == "g" || unit == "gb")
    mult = 1e9;
  else if (unit == "t" || unit == "tb")
    mult = 1e12;
  else if (unit == "kib")
    mult = 1024.0;
  else if (unit == "mib")
    mult = 1024.0 * 1024;
  else if (unit == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  STRATA_CHECK(pos > 0 && mult > 0 && v > 0 && std::isfinite(v), "memory size '", text,
               "' is not a size; write a positive number with an optional unit, e.g. 80GiB, "
               "24GB or 512MiB");
  return static_cast<int64_t>(v * mult);
}

FitVerdict fit_verdict(double predicted_peak, double limit) {
  FitVerdict v;
  v.needed = predicted_peak * (1 + kFitMargin);
  v.slack = limit - v.needed;
  v.fits = v.slack >= 0;
  return v;
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string mib(double b) {
  return c10::str(std::llround(b / kMiB * 10) / 10.0);
}

std::string describe(const PlannedEstimate& pe) {
  const auto& in = pe.input;
  const auto& e = pe.estimate;
  return c10::str(in.spec.flavour, " (", e.count.total, " parameters), ", pe.plan.dims.to_string(),
                  in.zero ? c10::str(", zero ", in.zero, in.offload ? " + offload" : "") : "", ", ",
                  in.precision, ", recompute ", recompute_name(in.recompute), ", micro-batch ",
                  in.micro_batch, " x ", in.micro_batches, " accumulation");
}

void print_estimate(const PlannedEstimate& pe) {
  const auto& e = pe.estimate;
  std::printf("strata estimate: %s\n", describe(pe).c_str());
  std::printf("per rank (MiB)      at peak   own peak\n");
  for (size_t c = 0; c < kNumCategories; ++c) {
    std::string extra;
    const auto cat = static_cast<Category>(c);
    if (cat == Category::kActivations)
      extra = c10::str("  (", mib(e.activations_per_micro_batch),
                       " per micro-batch at the end of forward x ", e.micro_batches_in_flight,
                       " in flight",
                       e.micro_batches_awaiting_weight > 0
                           ? c10::str(", ", mib(e.deferred_per_micro_batch), " x ",
                                      e.micro_batches_awaiting_weight, " awaiting W")
                           : std::string(),
                       ")");
    if (cat == Category::kOptimizer && e.host_bytes > 0)
      extra = c10::str("  (", mib(e.host_bytes), " offloaded to host memory",
                       pe.input.host_is_device ? ", counted here: CPU run" : "", ")");
    std::printf("  %-14s %10s %10s%s\n", category_name(cat), mib(e.peak.bytes[c]).c_str(),
                mib(e.category_peak[c]).c_str(), extra.c_str());
  }
  std::printf("  %-14s %10s            at %s\n", "peak", mib(e.peak.total()).c_str(),
              e.peak.phase.c_str());
  if (is_language_model(pe.input.spec.family)) {
    const LayerActivationCheck k = compare_with_korthikanti(pe.input.spec, pe.input.micro_batch);
    std::printf(
        "one layer at 2 bytes: Strata keeps %s MiB, Korthikanti et al.'s sbh(34 + 5as/h) "
        "gives %s MiB. %s\n",
        mib(k.strata).c_str(), mib(k.korthikanti).c_str(), k.explanation.c_str());
  }
  for (const auto& n : e.notes) std::printf("note: %s\n", n.c_str());
}

}  // namespace

int run_estimate(const EstimateArgs& a) {
  Config cfg;
  std::string where;
  nlohmann::json measured;
  if (!a.compare_dir.empty()) {
    // The run's own resolved config; flags still override it.
    RunRecord run = read_run(a.compare_dir);
    cfg = run.config;
    measured = run.peak_step();
  }
  apply_config_args(cfg, a.config_path, a.overrides, "estimate");
  const PlannedEstimate pe = plan_and_estimate(cfg, a.nproc);
  nlohmann::json out = estimate_json(pe);
  std::optional<FitVerdict> verdict;
  if (!a.device_memory.empty()) {
    const double limit = static_cast<double>(parse_size(a.device_memory));
    verdict = fit_verdict(pe.estimate.peak.total(), limit);
    out["device_memory"] = limit;
    out["fits"] = verdict->fits;
    out["needed_with_margin"] = std::llround(verdict->needed);
  }
  if (!measured.is_null()) {
    // The run's measurement is rank 0's, the first pipeline stage's (Note [estimated
    // pipeline stages]): compared with that stage's estimate.
    PlannedEstimate rank0 = pe;
    if (pe.input.pp > 1) {
      rank0.input.stage = 0;
      rank0.estimate = estimate_memory(rank0.input);
    }
    out["compare"] = compare_json(rank0, measured);
    // And the run's highest rank (Note [every rank's peak]) against the estimate's
    // highest stage: a limit holds for every device.
    if (measured.contains("mem_peak_max")) {
      const double m = measured["mem_peak_max"]["bytes"].get<double>();
      const double p = pe.estimate.peak.total();
      out["compare"]["highest"] = {{"rank", measured["mem_peak_max"]["rank"]},
                                   {"stage", pe.estimate.stage},
                                   {"predicted", std::llround(p)},
                                   {"measured", static_cast<int64_t>(m)},
                                   {"error", m > 0 ? (p - m) / m : 0.0}};
    }
  }
  if (a.json) {
    std::printf("%s\n", out.dump(1).c_str());
  } else {
    print_estimate(pe);
    if (verdict) {
      const double limit = out["device_memory"].get<double>();
      if (verdict->fits)
        std::printf("FITS in %s MiB: peak %s MiB + %.0f%% margin = %s MiB, %s MiB to spare\n",
                    mib(limit).c_str(), mib(pe.estimate.peak.total()).c_str(), kFitMargin * 100,
                    mib(verdict->needed).c_str(), mib(verdict->slack).c_str());
      else
        std::printf(
            "DOES NOT FIT in %s MiB: peak %s MiB + %.0f%% margin = %s MiB, short by %s MiB\n",
            mib(limit).c_str(), mib(pe.estimate.peak.total()).c_str(), kFitMargin * 100,
            mib(verdict->needed).c_str(), mib(-verdict->slack).c_str());
    }
    if (!measured.is_null()) {
      const auto& c = out["compare"];
      std::printf("\npredicted vs measured (%s, step %lld: the run's highest peak; rank 0)\n",
                  a.compare_dir.c_str(), static_cast<long long>(c["step"].get<int64_t>()));
      std::printf("  %-14s %12s %12s %12s %12s\n", "MiB", "pred@peak", "meas@peak", "pred own",
                  "meas own");
      for (const auto& r : c["categories"])
        std::printf("  %-14s %12s %12s %12s %12s\n", r["category"].get<std::string>().c_str(),
                    mib(r["predicted_at_peak"].get<double>()).c_str(),
                    mib(r["measured_at_peak"].get<double>()).c_str(),
                    mib(r["predicted_peak"].get<double>()).c_str(),
                    mib(r["measured_peak"].get<double>()).c_str());
      std::printf("  %-14s %12s %12s   error %+.1f%%\n", "peak",
                  mib(c["predicted"].get<double>()).c_str(),
                  mib(c["measured"].get<double>()).c_str(), c["error"].get<double>() * 100);
      if (c.contains("highest")) {
        const auto& h = c["highest"];
        std::printf(
            "  highest rank %lld: %s MiB measured, %s MiB predicted (stage %lld), error "
            "%+.1f%%\n",
            static_cast<long long>(h["rank"].get<int64_t>()),
            mib(h["measured"].get<double>()).c_str(), mib(h["predicted"].get<double>()).c_str(),
            static_cast<long long>(h["stage"].get<int64_t>()), h["error"].get<double>() * 100);
      }
    }
  }
  return verdict && !verdict->fits ? 1 : 0;
}

}  // namespace strata
