#pragma once
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "strata/distributed/comm.h"
#include "strata/memory/category.h"

namespace strata {

// A per-category array (bytes, exact or estimated) as {category name: bytes}, the
// form metrics.jsonl, the memory timeline and `strata estimate --json` use; and back.
template <class Bytes>
nlohmann::json category_json(const std::array<Bytes, kNumCategories>& b) {
  nlohmann::json j;
  for (size_t c = 0; c < kNumCategories; ++c) {
    if constexpr (std::is_integral_v<Bytes>)
      j[category_name(static_cast<Category>(c))] = static_cast<int64_t>(b[c]);
    else
      j[category_name(static_cast<Category>(c))] = static_cast<int64_t>(std::llround(b[c]));
  }
  return j;
}
CategoryBytes category_bytes(const nlohmann::json& j);

// A step's communication per mesh axis: {axis: {bytes, count, ms, ops: {op: {bytes,
// count, ms}}}}.
nlohmann::json comm_axes_json(const CommTotals& totals);

// One JSON object per line, flushed each step so a crashed run keeps its history.
// A run resumed at step S keeps the records of steps 1..S and drops later ones (the
// steps a failed run did after its checkpoint are run again), so every step appears
// once; a fresh run (S = 0) starts the file.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, int64_t resume_step);
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
