#pragma once
#include <c10/util/StringUtil.h>

#include <stdexcept>
#include <string>

namespace strata {

// A user error: bad config, bad input, a layout that does not fit. Its message is
// one line that names the problem and what to change; `strata` prints it as
// "error: <message>" and exits with status 2.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken invariant inside Strata: a bug, reported with file and line.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace strata

// STRATA_CHECK(cond, "tp=", tp, " does not divide n_head=", h, "; choose tp from {1, 2}")
#define STRATA_CHECK(cond, ...)                                  \
  do {                                                           \
    if (!(cond)) throw ::strata::Error(::c10::str(__VA_ARGS__)); \
  } while (0)

#define STRATA_FAIL(...) throw ::strata::Error(::c10::str(__VA_ARGS__))

#define STRATA_ASSERT(cond, ...)                                                                   \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      throw ::strata::InternalError(::c10::str("internal assert ", #cond, " failed at ", __FILE__, \
                                               ":", __LINE__, ": ", ##__VA_ARGS__));               \
  } while (0)
