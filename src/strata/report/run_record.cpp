#include "strata/report/run_record.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/core/errors.h"
#include "strata/train/metrics.h"

namespace strata {

namespace fs = std::filesystem;

int64_t TimelinePoint::total() const {
  int64_t t = 0;
  for (int64_t b : bytes) t += b;
  return t;
}

const nlohmann::json& RunRecord::peak_step() const {
  const nlohmann::json* best = &metrics.front();
  for (const auto& m : metrics)
    if (m.value("mem_peak_total", int64_t{0}) > best->value("mem_peak_total", int64_t{0}))
      best = &m;
  return *best;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      // A run killed mid-write leaves a torn last line; earlier lines are whole.
      if (in.peek() == EOF) break;
      STRATA_FAIL(path, " line ", n, " is not JSON; the file is damaged");
    }
  }
  return out;
}

RunRecord read_run(const std::string& dir) {
  STRATA_CHECK(fs::is_directory(dir), "run directory ", dir,
               " does not exist; give the logging.run_dir of a finished `strata train`");
  RunRecord r;
  r.dir = dir;
  const std::string cfg = dir + "/config.toml", metrics = dir + "/metrics.jsonl";
  STRATA_CHECK(fs::exists(cfg) && fs::exists(metrics), dir,
               " is not a run directory (it needs config.toml and metrics.jsonl, which "
               "`strata train` writes into logging.run_dir)");
  load_config_file(r.config, cfg);
  std::ifstream in(cfg);
  std::stringstream ss;
  ss << in.rdbuf();
  r.config_text = ss.str();
  r.metrics = read_jsonl(metrics);
  STRATA_CHECK(!r.metrics.empty(), metrics, " has no steps; the run ended before its first step");
  const std::string tl = dir + "/memory_timeline.jsonl";
  if (fs::exists(tl)) {
    for (const auto& j : read_jsonl(tl)) {
      TimelinePoint p;
      p.step = j.value("step", int64_t{0});
      p.t_ms = j.value("t_ms", 0.0);
      p.phase = j.value("phase", std::string());
      p.bytes = category_bytes(j["bytes"]);
      r.timeline.push_back(std::move(p));
    }
  }
  const std::string trace = dir + "/trace.json";
  if (fs::exists(trace)) {
    std::ifstream t(trace);
    r.trace = nlohmann::json::parse(t, nullptr, /*allow_exceptions=*/false);
    if (r.trace.is_discarded()) r.trace = nullptr;  // torn: the report goes without it
  }
  return r;
}

}  // namespace strata
