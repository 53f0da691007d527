#include "strata/parallel/recompute.h"

#include "strata/core/errors.h"

namespace strata {

void apply_recompute(Model& model, RecomputeMode mode, int64_t k) {
  const std::vector<Segment> segments = recompute_segments(mode, model.num_blocks(), k);
  const bool selective = mode == RecomputeMode::kSelective;
  for (int64_t i = 0; i < model.num_blocks(); ++i) {
    const bool ok = model.block(i).set_selective_recompute(
        selective ? SegmentRunner(recompute_checkpoint) : SegmentRunner());
    STRATA_CHECK(ok || !selective, "memory.recompute=selective recomputes attention cores, and ",
                 "this model's blocks have none; use full, every-k or sqrt");
  }
  std::vector<BlockSegment> parts;
  for (const auto& s : segments) parts.push_back({s.begin, s.end, s.recompute});
  model.set_segments(std::move(parts), recompute_checkpoint);
}

}  // namespace strata
