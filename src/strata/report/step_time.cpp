#include "strata/report/step_time.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include "strata/core/errors.h"
#include "strata/core/stats.h"
#include "strata/plan/layouts.h"
#include "strata/plan/measured_parts.h"
#include "strata/plan/profile.h"
#include "strata/report/svg.h"

namespace strata {

StepTimeComparison compare_step_time(const RunRecord& run, const PlannedEstimate& est,
                                     const std::string& profile_path) {
  StepTimeComparison c;
  std::vector<double> step, fb, optim;
  std::map<std::string, std::vector<double>> comm;
  const size_t first = run.metrics.size() > 1 ? 1 : 0;  // step 1 warms up
  for (size_t i = first; i < run.metrics.size(); ++i) {
    const auto& m = run.metrics[i];
    step.push_back(m.value("step_ms", 0.0));
    fb.push_back(m.value("fwd_bwd_ms", 0.0));
    optim.push_back(m.value("optim_ms", 0.0));
    if (m.contains("comm_axes") && m["comm_axes"].is_object())
      for (const auto& [axis, a] : m["comm_axes"].items())
        if (axis != "world") comm[axis].push_back(a.value("ms", 0.0));
  }
  c.step_ms = median(step, 0), c.fwd_bwd_ms = median(fb, 0), c.optim_ms = median(optim, 0);
  for (auto& [axis, v] : comm) c.comm_ms[axis] = median(v, 0);

  const ModelSpec& spec = est.plan.spec;
  if (!is_language_model(spec.family)) {
    c.why_not = "the cost model covers GPT and BERT flavours; " + spec.flavour + " is not one";
    return c;
  }
  const Config& cfg = run.config;
  const int64_t dp = est.plan.dims.dp(), tp = est.plan.dims.tp(), pp = est.plan.dims.pp();
  const int64_t threads = threads_per_rank(cfg.training.threads, dp * tp * pp);
  c.profile = profile_path.empty() ? default_profile_path(threads) : profile_path;
  if (!std::filesystem::exists(c.profile)) {
    c.why_not = "no hardware profile at " + c.profile + "; run strata calibrate --nproc " +
                std::to_string(dp * tp * pp) + " to predict the step";
    c.profile.clear();
    return c;
  }
  try {
    const HardwareProfile hw = load_profile(c.profile);
    c.caution = profile_threads_mismatch(hw, threads);
    const Layout l = Layout::of(cfg, dp, tp, pp);
    CostOptions o = cost_options(cfg, hw);
    if (const auto parts = time_parts_into(o, spec, {l.micro_batch}, hw))
      c.parts_timed = parts->largest_timed > 0;
    c.predicted = predict_step(spec, l, o, hw);
  } catch (const Error& e) {
    c.why_not = e.what();
    c.profile.clear();
  }
  return c;
}

std::string step_time_section(const StepTimeComparison& c) {
  std::ostringstream os;
  os << "<h2>Step time</h2>\n";
  if (!c.has_prediction()) {
    os << "<p>Measured step: " << c.step_ms
       << " ms (median). No prediction: " << html_escape(c.why_not) << "</p>\n";
    return os.str();
  }
  const StepPrediction& p = c.predicted;
  auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.1f", s * 1e3);
    return std::string(b);
  };
  auto measured = [&](const std::string& axis) {
    auto it = c.comm_ms.find(axis);
    return it == c.comm_ms.end() ? std::string("—") : ms(it->second / 1e3);
  };
  os << "<p>The cost model's step for this layout on <code>" << html_escape(c.profile)
     << "</code> (Note [step time in the report])"
     << (c.parts_timed ? ", the model's parts timed on this machine (Note [measured parts])" : "")
     << ": measured times of collectives include what overlaps compute; predicted ones are "
        "what is exposed.</p>\n"
     << (c.caution.empty() ? "" : "<p><b>Caution:</b> " + html_escape(c.caution) + ".</p>\n")
     << "<table><tr><th>term</th><th>predicted ms</th><th>measured ms</th></tr>\n"
     << "<tr><td>step</td><td>" << ms(p.step_s) << "</td><td>" << ms(c.step_ms / 1e3)
     << "</td></tr>\n"
     << "<tr><td>forward + backward (compute, recompute, tp, bubble)</td><td>"
     << ms(p.compute_s + p.recompute_s + p.tp_comm_s + p.bubble_s) << "</td><td>"
     << ms(c.fwd_bwd_ms / 1e3) << "</td></tr>\n"
     << "<tr><td>&nbsp;&nbsp;compute</td><td>" << ms(p.compute_s) << "</td><td>—</td></tr>\n"
     << "<tr><td>&nbsp;&nbsp;recompute</td><td>" << ms(p.recompute_s) << "</td><td>—</td></tr>\n"
     << "<tr><td>&nbsp;&nbsp;tensor-parallel communication</td><td>" << ms(p.tp_comm_s)
     << "</td><td>" << measured("tp") << "</td></tr>\n"
     << "<tr><td>&nbsp;&nbsp;pipeline bubble (measured: send/recv waits)</td><td>" << ms(p.bubble_s)
     << "</td><td>" << measured("pp") << "</td></tr>\n"
     << "<tr><td>data-parallel communication and ZeRO copies</td><td>" << ms(p.dp_exposed_s)
     << "</td><td>" << measured("dp") << "</td></tr>\n"
     << "<tr><td>optimizer (and offload)</td><td>" << ms(p.optimizer_s + p.offload_s) << "</td><td>"
     << ms(c.optim_ms / 1e3) << "</td></tr>\n"
     << "</table>\n";
  return os.str();
}

}  // namespace strata
