#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Inline SVG charts for `strata report`: pure functions from numbers to markup,
// no scripts, no external resources (Note [self-contained report]).
struct Series {
  std::string name;
  std::string color;
  std::vector<double> x, y;
  bool dashed = false;
};
struct Marker {
  double x = 0;
  std::string label;
};
struct HLine {
  double y = 0;
  std::string label;
  std::string color;
  bool dashed = false;
};
struct ChartSpec {
  std::string title, x_label, y_label;
  int width = 960, height = 300;
  std::vector<Marker> markers;  // vertical phase lines
  std::vector<HLine> hlines;    // horizontal reference lines
  bool bars = false;            // line_chart: bars instead of lines (first series)
  // Named rows instead of a numeric y axis (row i spans [i, i+1), drawn top down).
  std::vector<std::string> rows;
};
struct GanttBar {
  int64_t row = 0;
  double start = 0, end = 0;
  std::string label, color, title;  // label: drawn inside when it fits; title: the tooltip
};

// Lines (or bars) over a shared x axis.
std::string line_chart(const ChartSpec& c, const std::vector<Series>& series);
// Stacked areas: layers' y are stacked in order over x (taken from the first layer).
std::string stacked_area_chart(const ChartSpec& c, const std::vector<Series>& layers);

// Bars on named rows over a shared x axis (a pipeline's per-stage schedule); `legend`
// names the colours, and the gaps between bars are idle time.
std::string gantt_chart(const ChartSpec& c, const std::vector<GanttBar>& bars,
                        const std::vector<Series>& legend);

// 1, 2 or 5 times a power of ten, so that [lo, hi] gets about `target` ticks.
double nice_step(double lo, double hi, int target);
std::string html_escape(const std::string& s);

}  // namespace strata
