#pragma once
#include <ATen/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "strata/distributed/comm.h"
#include "strata/models/model.h"
#include "strata/parallel/grad_sync.h"
#include "strata/parallel/pipeline/schedule.h"
#include "strata/parallel/pipeline/simulate.h"

namespace strata {

// Runs one rank's action list for one optimizer step (Note [schedules are data]).
// Forward(m, c): part c's forward on micro-batch m (batch_of(m) gives it), under
// autocast to compute_dtype, inside grad_sync.forward; Backward(m, c): the loss times
// backward_factor (loss scale / micro-batches) back-propagated, or, on a part that is
// not the last virtual stage, its output's received gradient. set_sync is true only
// for the last micro-batch, so data parallelism reduces once per step (DDP, ZeRO-1)
// or per micro-batch where it must (ZeRO-2/3 decide that themselves). Activations are
// tagged as such. Returns the sum of the micro-batches' losses (0 on ranks without
// the last virtual stage).
//
// Note [pipeline executor]: with a pipeline (pp set), part c of this rank is virtual
// stage c·p + rank. Messages go through the pp group's send/recv (c10d; every wait
// has the collective timeout): a receive is posted at its action and waited by the
// compute that needs it; a send is never waited before the step's end, so neighbours
// never wait on each other's sends, except that an activation's send is waited (and
// its buffer dropped) when its gradient has arrived, when it has surely been
// received, so the stage's sent outputs are not held m times, and a gradient's when
// an activation the neighbour sent after receiving it has arrived (Note [sent
// gradients released]). Shapes are static (activation_shape,
// one micro-batch's (B, T, C)), so no shape handshake. Each message's tag names its micro-batch,
// receiving virtual stage and kind, so no two messages between a pair can be
// confused. A received activation is a leaf that requires grad; its gradient is what
// the backward sends back. zb-h1's split backward: I is the backward with the
// linears' weight gradients deferred, W applies them (Note [deferred weight
// gradients]); the model's linears must be marked deferrable.
struct StepContext {
  std::vector<std::shared_ptr<Model>>& parts;
  GradSync& grad_sync;
  c10::DeviceType device = c10::DeviceType::CPU;
  at::ScalarType compute_dtype = at::kFloat;
  double backward_factor = 1;
  Comm* pp = nullptr;                       // the pipeline group; null: one stage
  std::vector<int64_t> activation_shape{};  // one micro-batch's activations between stages
  at::ScalarType activation_dtype = at::kFloat;
  // When set, every action's start and end in seconds from the step's start (a receive
  // posts at once; its wait shows as the gap before the compute that needs it).
  std::vector<TimedAction>* timeline = nullptr;
  // Per action of the list, the gradient sends to wait (and free) once its input has
  // arrived (sent_gradients_done; Note [sent gradients released]). Null: all at the
  // step's end.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>>* sent_gradients_done = nullptr;
};
double run_stage_actions(const StageActions& actions, int64_t micro_batches, StepContext& ctx,
                         const std::function<Batch(int64_t micro)>& batch_of);

}  // namespace strata
