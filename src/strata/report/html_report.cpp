#include "strata/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/core/stats.h"
#include "strata/parallel/pipeline/simulate.h"
#include "strata/report/estimate_json.h"
#include "strata/report/svg.h"

namespace strata {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// Category colours (Tableau 10), in Category order.
constexpr const char* kColors[kNumCategories] = {"#4e79a7", "#f28e2b", "#e15759",
                                                 "#76b7b2", "#59a14f", "#bab0ac"};

std::string fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

double number(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

const char* kStyle = R"(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px auto; max-width: 1000px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 2px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 140px; }
.card b { display: block; font-size: 18px; }
.card span { color: #666; font-size: 12px; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { padding: 3px 10px; text-align: right; border-bottom: 1px solid #eee; }
th:first-child, td:first-child { text-align: left; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; font-size: 12px; }
.chart .title { font-weight: 600; font-size: 13px; }
.chart .tick { font-size: 11px; fill: #555; }
.chart .label { font-size: 12px; fill: #333; }
.chart .note { font-size: 11px; font-weight: 600; }
.chart .grid { stroke: #eee; }
.chart .axis { stroke: #888; }
.chart .marker { stroke: #999; stroke-dasharray: 2 3; }
.hint { color: #666; font-size: 12px; }
.warn { color: #a33; }
)";

// One empty series per category, named and coloured, for a stacked-area chart.
std::vector<Series> category_layers() {
  std::vector<Series> layers(kNumCategories);
  for (size_t c = 0; c < kNumCategories; ++c) {
    layers[c].name = category_name(static_cast<Category>(c));
    layers[c].color = kColors[c];
  }
  return layers;
}

std::string card(const std::string& value, const std::string& what) {
  return "<div class=\"card\"><b>" + html_escape(value) + "</b><span>" + html_escape(what) +
         "</span></div>";
}

// Phases worth a vertical line: where a micro-step starts, its loss, the optimizer.
bool major_phase(const std::string& p) {
  return (p.rfind("micro[", 0) == 0 && (p.find(".forward.begin") != std::string::npos ||
                                        p.find(".loss") != std::string::npos)) ||
         p == "optimizer.begin" || p == "step.begin";
}

std::string memory_section(const RunRecord& run, const std::optional<PlannedEstimate>& est) {
  std::ostringstream os;
  const nlohmann::json& peak_step = run.peak_step();
  const double measured = number(peak_step, "mem_peak_total");
  os << "<h2>Memory</h2>\n";
  if (run.timeline.empty()) {
    os << "<p class=\"hint\">No memory timeline in this run "
          "(logging.memory_timeline_steps=0).</p>\n";
  } else {
    // Steps one after another on one time axis.
    std::vector<double> xs;
    std::vector<Series> layers = category_layers();
    ChartSpec spec;
    spec.title = "Measured: tracked bytes by category at each phase boundary (rank 0)";
    spec.x_label =
        "time since the step began (ms); dotted lines: micro-step start, loss, optimizer";
    spec.y_label = "MiB";
    double offset = 0, last = 0;
    int64_t step = -1;
    double timeline_peak = 0;
    std::map<int64_t, bool> steps;
    for (const auto& p : run.timeline) {
      if (p.step != step) {
        offset += last;
        step = p.step;
        steps[step] = true;
      }
      last = p.t_ms;
      const double x = offset + p.t_ms;
      xs.push_back(x);
      for (size_t c = 0; c < kNumCategories; ++c)
        layers[c].y.push_back(static_cast<double>(p.bytes[c]) / kMiB);
      if (major_phase(p.phase))
        spec.markers.push_back({x, c10::str("step ", p.step, ": ", p.phase)});
    }
    for (auto& l : layers) l.x = xs;
    for (const auto& m : run.metrics)
      if (steps.count(m.value("step", int64_t{0})))
        timeline_peak = std::max(timeline_peak, number(m, "mem_peak_total"));
    spec.hlines.push_back({timeline_peak / kMiB,
                           "measured peak " + fixed(timeline_peak / kMiB) +
                               " MiB (allocator high-water mark; transients fall between samples)",
                           "#c0392b", false});
    if (est)
      spec.hlines.push_back({est->estimate.peak.total() / kMiB,
                             "predicted peak " + fixed(est->estimate.peak.total() / kMiB) +
                                 " MiB at " + est->estimate.peak.phase,
                             "#222", true});
    os << stacked_area_chart(spec, layers);
  }
  if (est) {
    const auto& e = est->estimate;
    ChartSpec spec;
    spec.title = "Predicted: one step phase by phase (strata estimate)";
    spec.x_label = "phase (hover a line for its name)";
    spec.y_label = "MiB";
    std::vector<Series> layers = category_layers();
    for (size_t i = 0; i < e.timeline.size(); ++i) {
      const auto& p = e.timeline[i];
      for (size_t c = 0; c < kNumCategories; ++c) {
        layers[c].x.push_back(static_cast<double>(i));
        layers[c].y.push_back(p.bytes[c] / kMiB);
      }
      if (major_phase(p.phase) || p.phase == e.peak.phase)
        spec.markers.push_back({static_cast<double>(i), p.phase});
    }
    if (std::isfinite(measured))
      spec.hlines.push_back({measured / kMiB,
                             c10::str("measured peak ", fixed(measured / kMiB), " MiB (step ",
                                      peak_step.value("step", 0), ")"),
                             "#c0392b", false});
    os << stacked_area_chart(spec, layers);

    const nlohmann::json cmp = compare_json(*est, peak_step);
    os << "<table><tr><th>MiB (rank 0)</th><th>predicted at peak</th><th>measured at peak</th>"
          "<th>predicted own peak</th><th>measured own peak</th></tr>\n";
    for (const auto& r : cmp["categories"])
      os << "<tr><td>" << r["category"].get<std::string>() << "</td><td>"
         << fixed(r["predicted_at_peak"].get<double>() / kMiB) << "</td><td>"
         << fixed(r["measured_at_peak"].get<double>() / kMiB) << "</td><td>"
         << fixed(r["predicted_peak"].get<double>() / kMiB) << "</td><td>"
         << fixed(r["measured_peak"].get<double>() / kMiB) << "</td></tr>\n";
    os << "<tr><th>peak</th><th>" << fixed(cmp["predicted"].get<double>() / kMiB) << "</th><th>"
       << fixed(cmp["measured"].get<double>() / kMiB) << "</th><th colspan=\"2\">error "
       << fixed(cmp["error"].get<double>() * 100, 2) << "%, predicted at "
       << html_escape(e.peak.phase) << "</th></tr></table>\n";
    for (const auto& n : e.notes) os << "<p class=\"hint\">note: " << html_escape(n) << "</p>\n";
  }
  return os.str();
}

std::string curves_section(const RunRecord& run) {
  std::ostringstream os;
  Series loss{"train loss", "#4e79a7", {}, {}}, eval{"eval loss", "#e15759", {}, {}};
  Series tps{"tokens/s", "#59a14f", {}, {}}, comm{"comm ms", "#f28e2b", {}, {}};
  Series wait{"waited on comm ms", "#b07aa1", {}, {}};
  bool samples = false;
  for (const auto& m : run.metrics) {
    const double s = number(m, "step");
    loss.x.push_back(s);
    loss.y.push_back(number(m, "loss"));
    if (std::isfinite(number(m, "eval_loss"))) {
      eval.x.push_back(s);
      eval.y.push_back(number(m, "eval_loss"));
    }
    tps.x.push_back(s);
    tps.y.push_back(number(m, "tokens_per_s"));
    comm.x.push_back(s);
    comm.y.push_back(number(m, "comm_ms"));
    double w = NAN;
    if (m.contains("ddp")) w = number(m["ddp"], "comm_ms");
    if (m.contains("zero")) w = number(m["zero"], "wait_ms");
    if (std::isfinite(w)) {
      wait.x.push_back(s);
      wait.y.push_back(w);
    }
    samples = samples || m.contains("samples_per_s");
  }
  os << "<h2>Training</h2>\n";
  ChartSpec c;
  c.title = "Loss";
  c.x_label = "step";
  c.y_label = "loss";
  std::vector<Series> ls{loss};
  if (!eval.x.empty()) ls.push_back(eval);
  os << line_chart(c, ls);
  c.title = "Throughput";
  c.y_label = "tokens/s";
  os << line_chart(c, {tps});
  os << "<h2>Communication</h2>\n";
  c.title = "Collective time per step (all collectives this rank issued; overlapped time included)";
  c.y_label = "ms";
  c.bars = true;
  os << line_chart(c, {comm});
  if (!wait.x.empty()) {
    c.title = "Time the step waited on communication (DDP: reduction time; ZeRO: waits)";
    c.bars = false;
    os << line_chart(c, {wait});
  }
  return os.str();
}

// Note [pipeline section]: the measured bubble per step (metrics' "pp") and, from
// trace.json, a Gantt chart of the traced step: one row per pipeline stage, one bar
// per compute action coloured by kind and labelled by micro-batch; the gaps are the
// time a stage waited for its neighbours.
std::string pipeline_section(const RunRecord& run) {
  Series bubble{"measured bubble", "#4e79a7", {}, {}};
  for (const auto& m : run.metrics)
    if (m.contains("pp")) {
      bubble.x.push_back(number(m, "step"));
      bubble.y.push_back(number(m["pp"], "bubble") * 100);
    }
  const auto timelines = timelines_from_trace(run.trace);
  const bool gantt = !timelines.empty();
  if (bubble.x.empty() && !gantt) return "";
  std::ostringstream os;
  os << "<h2>Pipeline</h2>\n";
  ChartSpec c;
  c.x_label = "step";
  if (!bubble.x.empty()) {
    c.title = "Bubble: share of the stages' time spent waiting, per step";
    c.y_label = "%";
    c.bars = true;
    os << line_chart(c, {bubble});
  }
  if (!gantt) return os.str();
  const std::vector<std::pair<std::string, std::string>> kinds = {{"forward", "#4e79a7"},
                                                                  {"backward", "#f28e2b"},
                                                                  {"backward-input", "#e15759"},
                                                                  {"backward-weight", "#59a14f"}};
  std::vector<GanttBar> bars;
  const auto rows = static_cast<int64_t>(timelines.size());
  for (int64_t r = 0; r < rows; ++r)
    for (const TimedAction& t : timelines[static_cast<size_t>(r)]) {
      const std::string cat = action_category(t.action.type);
      GanttBar b;
      b.row = r;
      b.start = t.start * 1e3;
      b.end = t.end * 1e3;
      b.color = "#999";
      for (const auto& [k, color] : kinds)
        if (k == cat) b.color = color;
      b.label = std::to_string(t.action.micro);
      b.title = c10::str(t.action.to_string(), " (", cat, "): ", fixed(b.end - b.start, 2), " ms");
      bars.push_back(std::move(b));
    }
  std::vector<Series> legend;
  for (const auto& [k, color] : kinds) legend.push_back({k, color, {}, {}});
  legend.push_back({"waiting (gaps)", "#eee", {}, {}});
  c.bars = false;
  c.title = c10::str("Schedule of step ", run.config.logging.trace_step,
                     " as run (trace.json; bars labelled by micro-batch)");
  c.x_label = "ms from each stage's step start";
  c.y_label = "";
  for (int64_t r = 0; r < rows; ++r) c.rows.push_back(c10::str("stage ", r));
  c.height = static_cast<int>(70 + 34 * rows);
  os << gantt_chart(c, bars, legend);
  return os.str();
}

std::string summary_cards(const RunRecord& run, const std::optional<PlannedEstimate>& est) {
  std::vector<double> step_ms, tps;
  for (size_t i = 0; i < run.metrics.size(); ++i) {
    if (i == 0 && run.metrics.size() > 1) continue;  // the first step warms up
    step_ms.push_back(number(run.metrics[i], "step_ms"));
    tps.push_back(number(run.metrics[i], "tokens_per_s"));
  }
  const auto& last = run.metrics.back();
  const double measured = number(run.peak_step(), "mem_peak_total");
  std::ostringstream os;
  os << "<div class=\"cards\">"
     << card(fixed(number(last, "loss"), 4), c10::str("loss at step ", last.value("step", 0)))
     << card(fixed(median(step_ms), 0) + " ms", "median step time")
     << card(fixed(median(tps), 0), "median tokens/s")
     << card(fixed(measured / kMiB) + " MiB", "measured peak (tracked, rank 0)");
  if (est) {
    const double p = est->estimate.peak.total();
    os << card(fixed(p / kMiB) + " MiB", "predicted peak")
       << card(c10::str(measured > 0 ? (p - measured) / measured * 100 >= 0 ? "+" : "" : "",
                        fixed(measured > 0 ? (p - measured) / measured * 100 : 0, 2), "%"),
               "estimate error");
  }
  os << "</div>\n";
  return os.str();
}

}  // namespace

std::string render_report(const RunRecord& run, const std::optional<PlannedEstimate>& est,
                          const std::string& estimate_error,
                          const std::optional<StepTimeComparison>& step_time) {
  std::ostringstream os;
  const Config& cfg = run.config;
  std::string what = cfg.model.flavour;
  if (est)
    what = c10::str(est->input.spec.flavour, ", ", est->estimate.count.total, " parameters, ",
                    est->plan.dims.to_string());
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
     << "<title>Strata report: " << html_escape(run.dir) << "</title>\n<style>" << kStyle
     << "</style></head>\n<body>\n<h1>Strata run report</h1>\n<p class=\"sub\">"
     << html_escape(run.dir) << " &middot; " << html_escape(what) << " &middot; "
     << run.metrics.size() << " steps &middot; precision " << html_escape(cfg.memory.precision)
     << ", recompute " << html_escape(cfg.memory.recompute) << ", zero " << cfg.parallel.zero
     << "</p>\n";
  os << summary_cards(run, est);
  if (!est) os << "<p class=\"warn\">No prediction: " << html_escape(estimate_error) << "</p>\n";
  os << memory_section(run, est);
  if (step_time) os << step_time_section(*step_time);
  os << curves_section(run) << pipeline_section(run);
  os << "<h2>Resolved config</h2>\n<pre>" << html_escape(run.config_text) << "</pre>\n";
  os << "<p class=\"hint\">Written by strata report. Self-contained: no scripts and no external "
        "resources.</p>\n</body></html>\n";
  return os.str();
}

int run_report(const std::string& run_dir, const std::string& output) {
  RunRecord run = read_run(run_dir);
  std::optional<PlannedEstimate> est;
  std::string error;
  try {
    est = plan_and_estimate(run.config, 0);
  } catch (const Error& e) {
    error = e.what();  // the run exists; its data source may not be here any more
  }
  std::optional<StepTimeComparison> step_time;
  if (est) {
    step_time = compare_step_time(run, *est);
    if (step_time->has_prediction())
      std::printf("step: predicted %.1f ms, measured %.1f ms (median; profile %s)\n",
                  step_time->predicted.step_s * 1e3, step_time->step_ms,
                  step_time->profile.c_str());
    else
      std::printf("step: measured %.1f ms (median); no prediction: %s\n", step_time->step_ms,
                  step_time->why_not.c_str());
  }
  const std::string path = output.empty() ? run_dir + "/report.html" : output;
  write_file_atomic(path, render_report(run, est, error, step_time));
  std::printf("report: %s\n", path.c_str());
  return 0;
}

}  // namespace strata
