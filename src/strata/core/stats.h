#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

namespace strata {

// The middle value of v (the upper of the two middle ones for an even count), or
// `if_empty` when v is empty: the timing figures (measured steps, calibration repeats,
// a report's step times) are medians.
double median(std::vector<double> v, double if_empty = NAN);

// The fastest of several runs of the same work, each given by its steps' times: the
// smallest of their medians (NAN when none has a step). On a shared machine a slow
// moment only adds time, so the fastest run is the steadiest figure of its speed
// (Note [step calibration, spread runs]).
double fastest_run(const std::vector<std::vector<double>>& runs);
// Which of runs that is (runs.size() when none has a step), for what else it measured.
size_t fastest_run_index(const std::vector<std::vector<double>>& runs);

}  // namespace strata
