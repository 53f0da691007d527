#pragma once
#include <cmath>
#include <vector>

namespace strata {

// The middle value of v (the upper of the two middle ones for an even count), or
// `if_empty` when v is empty: the timing figures (measured steps, calibration repeats,
// a report's step times) are medians.
double median(std::vector<double> v, double if_empty = NAN);

}  // namespace strata
