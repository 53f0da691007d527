#include "strata/plan/layouts.h"

#include <algorithm>

#include "strata/core/errors.h"
#include "strata/parallel/parallelize.h"
#include "strata/parallel/pipeline/schedule.h"
#include "strata/plan/plan.h"

namespace strata {

void Layout::apply(Config& cfg) const {
  auto& p = cfg.parallel;
  p.dp = dp, p.tp = tp, p.pp = pp, p.pp_virtual = pp_virtual, p.pp_schedule = schedule;
  p.zero = zero, p.offload = offload, p.sequence_parallel = sequence_parallel;
  cfg.memory.recompute = recompute;
  cfg.training.micro_batch_size = micro_batch;
}

Layout Layout::of(const Config& cfg, int64_t dp, int64_t tp, int64_t pp) {
  const auto& p = cfg.parallel;
  Layout l{dp,
           tp,
           pp,
           p.pp_virtual,
           p.pp_schedule,
           p.zero,
           p.offload,
           p.sequence_parallel,
           cfg.memory.recompute,
           cfg.training.micro_batch_size};
  if (l.micro_batch <= 0) l.micro_batch = cfg.training.batch_size / std::max<int64_t>(dp, 1);
  return l;
}

std::vector<std::string> Layout::overrides() const {
  return {"--parallel.dp=" + std::to_string(dp),
          "--parallel.tp=" + std::to_string(tp),
          "--parallel.pp=" + std::to_string(pp),
          "--parallel.pp_virtual=" + std::to_string(pp_virtual),
          "--parallel.pp_schedule=" + schedule,
          "--parallel.zero=" + std::to_string(zero),
          std::string("--parallel.offload=") + (offload ? "true" : "false"),
          std::string("--parallel.sequence_parallel=") + (sequence_parallel ? "true" : "false"),
          "--memory.recompute=" + recompute,
          "--training.micro_batch_size=" + std::to_string(micro_batch)};
}

std::string Layout::to_string() const {
  std::string s =
      "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp);
  if (pp > 1) s += " " + schedule + (pp_virtual > 1 ? " v=" + std::to_string(pp_virtual) : "");
  if (sequence_parallel) s += " sp";
  s += " zero=" + std::to_string(zero) + (offload ? "+offload" : "");
  return s + " mb=" + std::to_string(micro_batch) + " recompute=" + recompute;
}

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Whether Strata runs cfg on `world` ranks: the checks of `strata train` before and
// during parallelize() that need no process group.
bool starts(const Config& cfg, int64_t world, const DataShape& data) {
  try {
    const RunPlan plan = plan_run(cfg, world, data);
    const ModelSpec& s = plan.spec;
    const auto& p = cfg.parallel;
    const int64_t tp = plan.dims.tp(), pp = plan.dims.pp();
    if (!is_language_model(s.family) && (tp > 1 || pp > 1)) return false;
    if (tp > 1 && ((4 * s.d_model) % tp != 0 || (p.sequence_parallel && s.seq_len % tp != 0)))
      return false;
    if (cfg.memory.recompute == "selective" && !is_language_model(s.family)) return false;
    check_pipeline_layout(p, plan.dims);
    if (pp > 1 || p.pp_virtual > 1) {
      const int64_t stages = pp * p.pp_virtual;
      if (s.n_layer < stages || (p.pp_virtual > 1 && s.n_layer % stages != 0)) return false;
      (void)pipeline_schedule(parse_schedule_kind(p.pp_schedule), pp, plan.accum, p.pp_virtual);
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

const std::vector<std::string>& layout_keys() {
  static const std::vector<std::string> keys = {
      "parallel.dp",          "parallel.tp",
      "parallel.pp",          "parallel.pp_virtual",
      "parallel.pp_schedule", "parallel.zero",
      "parallel.offload",     "parallel.sequence_parallel",
      "memory.recompute",     "training.micro_batch_size"};
  return keys;
}

bool layout_agrees(const Layout& l, const Config& cfg, const std::string& key) {
  const auto& p = cfg.parallel;
  if (key == "parallel.dp") return l.dp == p.dp;
  if (key == "parallel.tp") return l.tp == p.tp;
  if (key == "parallel.pp") return l.pp == p.pp;
  if (key == "parallel.pp_virtual") return l.pp_virtual == p.pp_virtual;
  if (key == "parallel.pp_schedule") return l.pp == 1 || l.schedule == p.pp_schedule;
  if (key == "parallel.zero") return l.zero == p.zero;
  if (key == "parallel.offload") return l.offload == p.offload;
  if (key == "parallel.sequence_parallel") return l.sequence_parallel == p.sequence_parallel;
  if (key == "memory.recompute") return l.recompute == cfg.memory.recompute;
  if (key == "training.micro_batch_size") return l.micro_batch == cfg.training.micro_batch_size;
  std::string known;
  for (const auto& k : layout_keys()) known += (known.empty() ? "" : ", ") + k;
  STRATA_FAIL("--fix ", key, " is not a layout key; fix one of ", known);
}

std::vector<Layout> enumerate_layouts(const Config& cfg, int64_t world, const DataShape& data,
                                      const std::vector<std::string>& fixed) {
  STRATA_CHECK(world >= 1, "a layout needs at least one rank (--nproc ", world, ")");
  for (const auto& key : fixed) (void)layout_agrees(Layout{}, cfg, key);  // known keys only
  std::vector<Layout> out;
  const int64_t batch = cfg.training.batch_size;
  for (int64_t tp : divisors(world))
    for (int64_t pp : divisors(world / tp)) {
      const int64_t dp = world / (tp * pp);
      if (batch % dp != 0) continue;
      std::vector<std::pair<int64_t, std::string>> pipes = {{1, "1f1b"}};
      if (pp > 1) pipes = {{1, "gpipe"}, {1, "1f1b"}, {1, "zb-h1"}, {2, "interleaved"}};
      for (const auto& [v, schedule] : pipes)
        for (int64_t zero = 0; zero <= 3; ++zero)
          for (bool offload : {false, true})
            for (bool sp : {false, true})
              for (const char* recompute : {"none", "selective", "full"})
                for (int64_t mb : divisors(batch / dp)) {
                  if ((offload && zero == 0) || (sp && tp == 1)) continue;
                  const Layout l{dp, tp, pp, v, schedule, zero, offload, sp, recompute, mb};
                  bool agrees = true;
                  for (const auto& key : fixed) agrees = agrees && layout_agrees(l, cfg, key);
                  if (!agrees) continue;
                  Config c = cfg;
                  l.apply(c);
                  if (starts(c, world, data)) out.push_back(l);
                }
    }
  return out;
}

}  // namespace strata
