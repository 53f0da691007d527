#include "strata/core/logging.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace strata {
namespace {

int g_rank = 0;

LogLevel parse_level() {
  const char* v = std::getenv("STRATA_LOG_LEVEL");
  if (!v) return LogLevel::kInfo;
  if (!strcasecmp(v, "DEBUG")) return LogLevel::kDebug;
  if (!strcasecmp(v, "WARN") || !strcasecmp(v, "WARNING")) return LogLevel::kWarn;
  if (!strcasecmp(v, "ERROR")) return LogLevel::kError;
  return LogLevel::kInfo;
}

}  // namespace

LogLevel log_level() {
  static const LogLevel level = parse_level();
  return level;
}

void set_log_rank(int rank) {
  g_rank = rank;
}
int log_rank() {
  return g_rank;
}

void log_line(LogLevel level, const std::string& msg) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const char* tag = level == LogLevel::kWarn    ? "warning: "
                    : level == LogLevel::kError ? "error: "
                                                : "";
  FILE* out = level >= LogLevel::kWarn ? stderr : stdout;
  std::fprintf(out, "%s%s\n", tag, msg.c_str());
  std::fflush(out);
}

}  // namespace strata
