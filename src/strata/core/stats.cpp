#include "strata/core/stats.h"

#include <algorithm>

namespace strata {

double median(std::vector<double> v, double if_empty) {
  if (v.empty()) return if_empty;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace strata
