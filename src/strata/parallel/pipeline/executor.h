#pragma once
#include <ATen/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "strata/models/model.h"
#include "strata/parallel/grad_sync.h"
#include "strata/parallel/pipeline/schedule.h"

namespace strata {

// Runs one stage's action list for one optimizer step (Note [schedules are data]).
// Forward(m, c): part c's forward on micro-batch m (batch_of(m) gives it), under
// autocast to compute_dtype, inside grad_sync.forward; Backward(m, c): the loss times
// backward_factor (loss scale / micro-batches) back-propagated. set_sync is true only
// for the last micro-batch, so data parallelism reduces once per step (DDP, ZeRO-1)
// or per micro-batch where it must (ZeRO-2/3 decide that themselves). Activations are
// tagged as such. Returns the sum of the micro-batches' losses.
struct StepContext {
  std::vector<std::shared_ptr<Model>>& parts;
  GradSync& grad_sync;
  c10::DeviceType device = c10::DeviceType::CPU;
  at::ScalarType compute_dtype = at::kFloat;
  double backward_factor = 1;
};
double run_stage_actions(const StageActions& actions, int64_t micro_batches, StepContext& ctx,
                         const std::function<Batch(int64_t micro)>& batch_of);

}  // namespace strata
