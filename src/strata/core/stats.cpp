#include "strata/core/stats.h"

#include <algorithm>

namespace strata {

double median(std::vector<double> v, double if_empty) {
  if (v.empty()) return if_empty;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double fastest_run(const std::vector<std::vector<double>>& runs) {
  double best = NAN;
  for (const auto& r : runs) {
    const double m = median(r);
    if (!std::isnan(m) && !(m >= best)) best = m;
  }
  return best;
}

}  // namespace strata
