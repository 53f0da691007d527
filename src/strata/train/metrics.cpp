#include "strata/train/metrics.h"

#include <unistd.h>

#include <cmath>
#include <fstream>

#include "strata/core/errors.h"
#include "strata/core/files.h"

namespace strata {

nlohmann::json comm_axes_json(const CommTotals& totals) {
  auto count = [](const CommCount& c) {
    return nlohmann::json{{"bytes", c.bytes}, {"count", c.count}, {"ms", c.ms}};
  };
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [axis, ops] : totals.by_axis) {
    CommCount sum;
    nlohmann::json j_ops;
    for (const auto& [op, c] : ops) {
      j_ops[op] = count(c);
      sum.ms += c.ms;
      sum.bytes += c.bytes;
      sum.count += c.count;
    }
    out[axis] = count(sum);
    out[axis]["ops"] = j_ops;
  }
  return out;
}

CategoryBytes category_bytes(const nlohmann::json& j) {
  CategoryBytes b{};
  for (size_t c = 0; c < kNumCategories; ++c) {
    const char* name = category_name(static_cast<Category>(c));
    if (j.contains(name)) b[c] = j[name].get<int64_t>();
  }
  return b;
}

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step) : path_(path) {
  if (resume_step > 0) {
    std::ifstream in(path);
    std::string kept;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.value("step", int64_t{0}) <= resume_step) kept += line + "\n";
    }
    write_file_atomic(path, kept);
  }
  f_ = std::fopen(path.c_str(), resume_step > 0 ? "a" : "w");
  STRATA_CHECK(f_, "cannot write metrics to ", path, "; choose a writable logging.run_dir");
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t % 3600 / 60));
  } else if (t >= 60) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(t));
  }
  return buf;
}

std::string format_bytes(int64_t b) {
  char buf[32];
  const double v = static_cast<double>(b);
  if (std::abs(v) >= 1 << 30) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", v / (1 << 30));
  } else if (std::abs(v) >= 1 << 20) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", v / (1 << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", v / 1024);
  }
  return buf;
}

Progress::Progress(const std::string& mode, int64_t total_steps, int64_t interval, bool enabled)
    : live_(mode == "on" || (mode == "auto" && isatty(STDOUT_FILENO))),
      enabled_(enabled),
      total_(total_steps),
      interval_(interval) {}

void Progress::update(int64_t step, double loss, double tokens_per_s, double lr, double eta_s) {
  if (!enabled_) return;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "step %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s",
                static_cast<long long>(step), static_cast<long long>(total_), loss, lr,
                tokens_per_s, format_duration(eta_s).c_str());
  if (live_) {
    std::printf("\r\033[K%s", buf);
    dirty_ = true;
  } else if (step % interval_ == 0 || step == total_ || step == 1) {
    std::printf("%s\n", buf);
  }
  std::fflush(stdout);
}

void Progress::message(const std::string& line) {
  if (!enabled_) return;
  if (dirty_) std::printf("\r\033[K");
  std::printf("%s\n", line.c_str());
  dirty_ = false;
  std::fflush(stdout);
}

void Progress::finish() {
  if (dirty_) std::printf("\n");
  dirty_ = false;
  std::fflush(stdout);
}

}  // namespace strata
