#include "strata/core/stats.h"

#include <algorithm>

namespace strata {

double median(std::vector<double> v, double if_empty) {
  if (v.empty()) return if_empty;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

size_t fastest_run_index(const std::vector<std::vector<double>>& runs) {
  size_t best = runs.size();
  double best_median = NAN;
  for (size_t i = 0; i < runs.size(); ++i) {
    const double m = median(runs[i]);
    if (!std::isnan(m) && !(m >= best_median)) best = i, best_median = m;
  }
  return best;
}

double fastest_run(const std::vector<std::vector<double>>& runs) {
  const size_t i = fastest_run_index(runs);
  return i == runs.size() ? NAN : median(runs[i]);
}

}  // namespace strata
