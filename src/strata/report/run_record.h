#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/memory/category.h"

namespace strata {

// What a training run leaves in its run directory, read back for `strata
// estimate --compare` and `strata report`: the resolved config (config.toml),
// one metrics record per step (metrics.jsonl) and the memory timeline of the
// first steps (memory_timeline.jsonl, absent when logging.memory_timeline_steps=0).
struct TimelinePoint {
  int64_t step = 0;
  double t_ms = 0;
  std::string phase;
  CategoryBytes bytes{};
  int64_t total() const;
};

struct RunRecord {
  std::string dir;
  Config config;
  std::string config_text;
  std::vector<nlohmann::json> metrics;
  std::vector<TimelinePoint> timeline;
  // trace.json (logging.trace_step's schedule, Chrome trace events); null if absent.
  nlohmann::json trace;
  // The step record with the highest tracked peak (mem_peak_total).
  const nlohmann::json& peak_step() const;
};

// The records of a JSON-lines file (metrics.jsonl, memory_timeline.jsonl); a torn last
// line (a run killed mid-write) is left out, a damaged earlier one is one error line.
std::vector<nlohmann::json> read_jsonl(const std::string& path);

// One error line when the directory is not a run directory (no config.toml or
// no metrics.jsonl with at least one step).
RunRecord read_run(const std::string& dir);

}  // namespace strata
