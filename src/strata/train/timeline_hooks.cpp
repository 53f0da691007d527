#include "strata/train/timeline_hooks.h"

#include "strata/memory/timeline.h"

namespace strata {

void TimelineBlockHooks::pre_forward(int64_t block) {
  STRATA_TIMELINE_MARK("block[", block, "].forward.begin");
}

at::Tensor TimelineBlockHooks::post_forward(int64_t block, at::Tensor out) {
  if (!MemoryTimeline::get().recording()) return out;
  MemoryTimeline::get().mark(c10::str("block[", block, "].forward.end"));
  // The gradient of a block's output arrives just before the block's backward.
  if (out.requires_grad())
    out.register_hook(
        [block](const at::Tensor&) { STRATA_TIMELINE_MARK("block[", block, "].backward.begin"); });
  return out;
}

}  // namespace strata
