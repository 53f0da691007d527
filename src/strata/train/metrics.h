#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

// One JSON object per line, flushed each step so a crashed run keeps its history.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append);
  ~MetricsLog();
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

// The console view of training: on a terminal one live line rewritten in place
// (step/total, loss, tokens/s, ETA); otherwise a line every `interval` steps.
class Progress {
 public:
  // Only the enabled one (rank 0) prints.
  Progress(const std::string& mode, int64_t total_steps, int64_t interval, bool enabled);
  void update(int64_t step, double loss, double tokens_per_s, double lr, double eta_s);
  void message(const std::string& line);  // a permanent line (eval, checkpoint)
  void finish();

 private:
  bool live_, enabled_;
  int64_t total_, interval_;
  bool dirty_ = false;
};

std::string format_duration(double seconds);
std::string format_bytes(int64_t bytes);

}  // namespace strata
