#pragma once
#include <c10/util/StringUtil.h>

#include <string>

namespace strata {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Level from STRATA_LOG_LEVEL (DEBUG, INFO, WARN, ERROR); INFO by default.
LogLevel log_level();
void log_line(LogLevel level, const std::string& msg);

// Set once the rank is known, so rank-0-only messages can be filtered.
void set_log_rank(int rank);
int log_rank();

template <class... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, c10::str(args...));
}
template <class... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, c10::str(args...));
}
template <class... Args>
void log_warn(const Args&... args) {
  if (log_level() <= LogLevel::kWarn) log_line(LogLevel::kWarn, c10::str(args...));
}
// Info on rank 0 only: start-up tables, progress.
template <class... Args>
void log_rank0(const Args&... args) {
  if (log_rank() == 0 && log_level() <= LogLevel::kInfo)
    log_line(LogLevel::kInfo, c10::str(args...));
}

}  // namespace strata
