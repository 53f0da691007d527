#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/models/flavours.h"

namespace strata {

// Note [layout space]: what `strata plan` chooses among for a model, a world and a
// global batch (precision and batch are the user's): dp x tp x pp, virtual chunks and
// schedule, ZeRO stage and offload, recompute mode, sequence parallel and the
// micro-batch. A layout is kept only when the checks `strata train` makes accept it
// (plan_run, check_pipeline_layout, the schedule's own, the model's divisibility), so
// every layout listed starts.
struct Layout {
  int64_t dp = 1, tp = 1, pp = 1, pp_virtual = 1;
  std::string schedule = "1f1b";
  int64_t zero = 0;
  bool offload = false, sequence_parallel = false;
  std::string recompute = "none";
  int64_t micro_batch = 1;  // per rank

  int64_t ranks() const { return dp * tp * pp; }
  // Its [parallel] and [memory] keys, and the micro-batch, set on cfg.
  void apply(Config& cfg) const;
  // The --section.key=value overrides that run it.
  std::vector<std::string> overrides() const;
  std::string to_string() const;  // "dp=2 tp=1 pp=2 1f1b zero=1 mb=4 recompute=none"
  // The layout a config runs with dp x tp x pp (plan_run's dims).
  static Layout of(const Config& cfg, int64_t dp, int64_t tp, int64_t pp);
};

// The keys a plan can hold at the config's value (`strata plan --fix`): parallel.dp,
// parallel.tp, parallel.pp, parallel.pp_virtual, parallel.pp_schedule, parallel.zero,
// parallel.offload, parallel.sequence_parallel, memory.recompute,
// training.micro_batch_size.
const std::vector<std::string>& layout_keys();
// Whether l has cfg's value for `key` (one of layout_keys(); else one error line).
bool layout_agrees(const Layout& l, const Config& cfg, const std::string& key);

// Every layout of `world` ranks that starts for cfg's model and global batch, and has
// cfg's value for each of the `fixed` keys.
std::vector<Layout> enumerate_layouts(const Config& cfg, int64_t world, const DataShape& data,
                                      const std::vector<std::string>& fixed = {});

}  // namespace strata
