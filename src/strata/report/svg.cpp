#include "strata/report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace strata {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double nice_step(double lo, double hi, int target) {
  const double span = hi - lo;
  if (!(span > 0) || target < 1) return 1;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

namespace {

constexpr int kLeft = 70, kRight = 170, kTop = 34, kBottom = 44;

std::string num(double v) {
  char buf[32];
  const double a = std::abs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3))
    std::snprintf(buf, sizeof buf, "%.3g", v);
  else if (a >= 100 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The frame every chart shares: title, axes with ticks and labels, a legend.
class Frame {
 public:
  Frame(const ChartSpec& c, double x0, double x1, double y0, double y1)
      : c_(c), x0_(x0), x1_(x1 > x0 ? x1 : x0 + 1), y0_(y0), y1_(y1 > y0 ? y1 : y0 + 1) {}
  double px(double x) const {
    return kLeft + (x - x0_) / (x1_ - x0_) * (c_.width - kLeft - kRight);
  }
  double py(double y) const {
    // Named rows read top down.
    if (!c_.rows.empty()) y = y1_ - (y - y0_);
    return c_.height - kBottom - (y - y0_) / (y1_ - y0_) * (c_.height - kTop - kBottom);
  }
  void open(std::ostringstream& os) const {
    os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << c_.width
       << "\" height=\"" << c_.height << "\" viewBox=\"0 0 " << c_.width << " " << c_.height
       << "\" role=\"img\" aria-label=\"" << html_escape(c_.title) << "\">\n";
    os << "<text x=\"" << kLeft << "\" y=\"20\" class=\"title\">" << html_escape(c_.title)
       << "</text>\n";
    for (size_t i = 0; i < c_.rows.size(); ++i)
      os << "<text class=\"tick\" x=\"" << kLeft - 6 << "\" y=\""
         << py(static_cast<double>(i) + 0.5) + 4 << "\" text-anchor=\"end\">"
         << html_escape(c_.rows[i]) << "</text>\n";
    const double ys = nice_step(y0_, y1_, 5);
    for (double y = std::ceil(y0_ / ys) * ys; c_.rows.empty() && y <= y1_ + 1e-9 * ys; y += ys) {
      os << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << c_.width - kRight << "\" y1=\""
         << py(y) << "\" y2=\"" << py(y) << "\"/>"
         << "<text class=\"tick\" x=\"" << kLeft - 6 << "\" y=\"" << py(y) + 4
         << "\" text-anchor=\"end\">" << num(y) << "</text>\n";
    }
    const double xs = nice_step(x0_, x1_, 8);
    for (double x = std::ceil(x0_ / xs) * xs; x <= x1_ + 1e-9 * xs; x += xs)
      os << "<text class=\"tick\" x=\"" << px(x) << "\" y=\"" << c_.height - kBottom + 16
         << "\" text-anchor=\"middle\">" << num(x) << "</text>\n";
    os << "<line class=\"axis\" x1=\"" << kLeft << "\" x2=\"" << c_.width - kRight << "\" y1=\""
       << c_.height - kBottom << "\" y2=\"" << c_.height - kBottom << "\"/>"
       << "<line class=\"axis\" x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << kTop
       << "\" y2=\"" << c_.height - kBottom << "\"/>\n";
    os << "<text class=\"label\" x=\"" << (kLeft + c_.width - kRight) / 2 << "\" y=\""
       << c_.height - 8 << "\" text-anchor=\"middle\">" << html_escape(c_.x_label) << "</text>\n";
    os << "<text class=\"label\" transform=\"translate(16," << (kTop + c_.height - kBottom) / 2
       << ") rotate(-90)\" text-anchor=\"middle\">" << html_escape(c_.y_label) << "</text>\n";
  }
  void overlays(std::ostringstream& os) const {
    for (const auto& m : c_.markers) {
      if (m.x < x0_ || m.x > x1_) continue;
      os << "<line class=\"marker\" x1=\"" << px(m.x) << "\" x2=\"" << px(m.x) << "\" y1=\"" << kTop
         << "\" y2=\"" << c_.height - kBottom << "\"><title>" << html_escape(m.label)
         << "</title></line>\n";
    }
    // Labels alternate above (left) and below (right) their lines, so two close
    // lines (a prediction on its measurement) stay readable.
    for (size_t i = 0; i < c_.hlines.size(); ++i) {
      const HLine& h = c_.hlines[i];
      const bool below = i % 2 == 1;
      os << "<line x1=\"" << kLeft << "\" x2=\"" << c_.width - kRight << "\" y1=\"" << py(h.y)
         << "\" y2=\"" << py(h.y) << "\" stroke=\"" << h.color << "\" stroke-width=\"1.5\""
         << (h.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>"
         << "<text class=\"note\" x=\"" << (below ? c_.width - kRight - 6 : kLeft + 6) << "\" y=\""
         << (below ? py(h.y) + 13 : py(h.y) - 4) << "\" text-anchor=\"" << (below ? "end" : "start")
         << "\" fill=\"" << h.color << "\">" << html_escape(h.label) << "</text>\n";
    }
  }
  void legend(std::ostringstream& os, const std::vector<Series>& series, double first_y) const {
    double y = first_y;
    for (const auto& s : series) {
      if (s.name.empty()) continue;
      os << "<rect x=\"" << c_.width - kRight + 8 << "\" y=\"" << y - 9
         << "\" width=\"10\" height=\"10\" fill=\"" << s.color << "\"/><text class=\"tick\" x=\""
         << c_.width - kRight + 22 << "\" y=\"" << y << "\">" << html_escape(s.name) << "</text>\n";
      y += 16;
    }
  }

 private:
  const ChartSpec& c_;
  double x0_, x1_, y0_, y1_;
};

void bounds(const std::vector<Series>& series, double& x0, double& x1, double& y1) {
  x0 = std::numeric_limits<double>::infinity();
  x1 = -x0;
  y1 = 0;
  for (const auto& s : series) {
    for (double x : s.x) x0 = std::min(x0, x), x1 = std::max(x1, x);
    for (double y : s.y)
      if (std::isfinite(y)) y1 = std::max(y1, y);
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
}

}  // namespace

std::string line_chart(const ChartSpec& c, const std::vector<Series>& series) {
  double x0, x1, y1;
  bounds(series, x0, x1, y1);
  for (const auto& h : c.hlines) y1 = std::max(y1, h.y);
  double y0 = 0;
  if (!c.bars) {
    // Loss-like curves: start the axis near the data, not at zero.
    double lo = std::numeric_limits<double>::infinity();
    for (const auto& s : series)
      for (double y : s.y)
        if (std::isfinite(y)) lo = std::min(lo, y);
    if (std::isfinite(lo) && lo > 0.5 * y1) y0 = lo - 0.05 * (y1 - lo);
  }
  if (c.bars) x0 -= 0.5, x1 += 0.5;
  Frame f(c, x0, x1, y0, y1 * 1.05 + 1e-12);
  std::ostringstream os;
  f.open(os);
  for (const auto& s : series) {
    if (c.bars) {
      const double w = std::max(1.0, (f.px(x0 + 1) - f.px(x0)) * 0.7);
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        os << "<rect x=\"" << f.px(s.x[i]) - w / 2 << "\" y=\"" << f.py(s.y[i]) << "\" width=\""
           << w << "\" height=\"" << f.py(y0) - f.py(s.y[i]) << "\" fill=\"" << s.color
           << "\"><title>" << html_escape(s.name) << " " << num(s.x[i]) << ": " << num(s.y[i])
           << "</title></rect>\n";
      continue;
    }
    os << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.8\""
       << (s.dashed ? " stroke-dasharray=\"5 3\"" : "") << " points=\"";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i])) os << f.px(s.x[i]) << "," << f.py(s.y[i]) << " ";
    os << "\"/>\n";
    if (s.x.size() == 1)
      os << "<circle cx=\"" << f.px(s.x[0]) << "\" cy=\"" << f.py(s.y[0]) << "\" r=\"3\" fill=\""
         << s.color << "\"/>\n";
  }
  f.overlays(os);
  f.legend(os, series, kTop + 10);
  os << "</svg>\n";
  return os.str();
}

std::string stacked_area_chart(const ChartSpec& c, const std::vector<Series>& layers) {
  if (layers.empty()) return "";
  const std::vector<double>& xs = layers.front().x;
  std::vector<double> top(xs.size(), 0.0);
  std::vector<std::vector<double>> cum;
  for (const auto& l : layers) {
    for (size_t i = 0; i < xs.size(); ++i) top[i] += i < l.y.size() ? l.y[i] : 0;
    cum.push_back(top);
  }
  double y1 = 0;
  for (double t : top) y1 = std::max(y1, t);
  for (const auto& h : c.hlines) y1 = std::max(y1, h.y);
  const double x0 = xs.empty() ? 0 : xs.front(), x1 = xs.empty() ? 1 : xs.back();
  Frame f(c, x0, x1, 0, y1 * 1.08 + 1e-12);
  std::ostringstream os;
  f.open(os);
  // Drawn top layer first so each lower one paints over the part below it.
  for (size_t k = layers.size(); k-- > 0;) {
    os << "<path fill=\"" << layers[k].color << "\" fill-opacity=\"0.85\" stroke=\""
       << layers[k].color << "\" stroke-width=\"0.5\" d=\"M" << f.px(x0) << "," << f.py(0);
    // A step shape: a sample holds until the next one.
    for (size_t i = 0; i < xs.size(); ++i) {
      if (i > 0) os << " L" << f.px(xs[i]) << "," << f.py(cum[k][i - 1]);
      os << " L" << f.px(xs[i]) << "," << f.py(cum[k][i]);
    }
    os << " L" << f.px(x1) << "," << f.py(0) << " Z\"><title>" << html_escape(layers[k].name)
       << "</title></path>\n";
  }
  f.overlays(os);
  std::vector<Series> legend(layers.rbegin(), layers.rend());
  f.legend(os, legend, kTop + 10);
  os << "</svg>\n";
  return os.str();
}

std::string gantt_chart(const ChartSpec& c, const std::vector<GanttBar>& bars,
                        const std::vector<Series>& legend) {
  double x1 = 0;
  for (const GanttBar& b : bars) x1 = std::max(x1, b.end);
  const auto rows = static_cast<double>(c.rows.size());
  Frame f(c, 0, x1 > 0 ? x1 : 1, 0, rows > 0 ? rows : 1);
  std::ostringstream os;
  f.open(os);
  for (const GanttBar& b : bars) {
    const auto r = static_cast<double>(b.row);
    // Row r spans [r, r+1), mirrored: py(r) is its top edge. A small margin inside.
    const double x = f.px(b.start), w = std::max(0.5, f.px(b.end) - f.px(b.start));
    const double y = f.py(r) + 3, height = f.py(r + 1) - f.py(r) - 6;
    os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << height
       << "\" fill=\"" << b.color << "\"><title>" << html_escape(b.title) << "</title></rect>\n";
    if (!b.label.empty() && w > 7.0 * static_cast<double>(b.label.size()))
      os << "<text class=\"tick\" x=\"" << x + w / 2 << "\" y=\"" << y + height / 2 + 4
         << "\" text-anchor=\"middle\" fill=\"#fff\">" << html_escape(b.label) << "</text>\n";
  }
  f.overlays(os);
  f.legend(os, legend, kTop + 10);
  os << "</svg>\n";
  return os.str();
}

}  // namespace strata
