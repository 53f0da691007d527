#include "strata/parallel/pipeline/executor.h"

#include <map>

#include "strata/core/errors.h"
#include "strata/memory/precision.h"
#include "strata/memory/timeline.h"
#include "strata/memory/tracking_allocator.h"

namespace strata {

double run_stage_actions(const StageActions& actions, int64_t micro_batches, StepContext& ctx,
                         const std::function<Batch(int64_t)>& batch_of) {
  double loss_sum = 0;
  std::map<std::pair<int64_t, int64_t>, at::Tensor> losses;  // (chunk, micro) in flight
  for (const Action& a : actions) {
    MemoryScope scope(Category::kActivations);
    ctx.grad_sync.set_sync(a.micro + 1 == micro_batches);
    Model& part = *ctx.parts.at(static_cast<size_t>(a.chunk));
    if (a.type == ActionType::kForward) {
      Batch b = batch_of(a.micro);
      STRATA_TIMELINE_MARK("micro[", a.micro, "].forward.begin");
      at::Tensor loss;
      {
        AutocastScope autocast(ctx.device, ctx.compute_dtype);
        loss = ctx.grad_sync.forward([&] { return part.forward_part({}, b); });
      }
      STRATA_TIMELINE_MARK("micro[", a.micro, "].loss");
      losses[{a.chunk, a.micro}] = loss;
    } else {
      auto it = losses.find({a.chunk, a.micro});
      STRATA_ASSERT(it != losses.end(), "schedule runs ", a.to_string(), " before its forward");
      (it->second * ctx.backward_factor).backward();
      STRATA_TIMELINE_MARK("micro[", a.micro, "].backward.end");
      loss_sum += it->second.item<double>();
      losses.erase(it);
    }
  }
  return loss_sum;
}

}  // namespace strata
