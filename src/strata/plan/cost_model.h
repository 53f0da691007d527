#pragma once
#include <cstdint>
#include <string>

#include "strata/models/flavours.h"
#include "strata/plan/layouts.h"
#include "strata/plan/profile.h"

namespace strata {

// Note [cost model]: a training step's time for a transformer layout on a hardware
// profile, from the work each rank does:
//  - compute: each block's matrix multiplies (q/k/v, projection, MLP, attention's two
//    batched products; tp splits their output or input features) at the profile's rate
//    for that size, backward twice forward; element-wise work (norms, GELU, residuals,
//    softmax) as bytes over the memory bandwidth; the head's vocabulary GEMM and
//    fp32 cross-entropy on the last stage; recompute's extra forward (full: the blocks;
//    selective: attention's core);
//  - tensor parallel: two all-reduces of the activations per block in forward and two
//    in backward (sequence parallel: the same bytes as all-gathers and reduce-scatters),
//    on the critical path;
//  - the pipeline: the schedule itself simulated (simulate_schedule) with each stage's
//    forward and backward cost per micro-batch and the activations' send time, so the
//    bubble is that of the real schedule, partition and chunks;
//  - data parallel after the last backward: DDP's all-reduce and ZeRO-1/2's
//    reduce-scatter, of which the overlap fraction hides behind the last micro-batch's
//    backward; ZeRO's all-gather of the updated parameters; ZeRO-3's per-block gathers
//    (forward and backward) and reduce-scatters each micro-batch, hidden behind the
//    block's compute by prefetch up to the overlap fraction;
//  - the optimizer: AdamW's traffic over this rank's (sharded) parameters; offload's
//    copies over the host link (none on a CPU, where host memory is the device's);
//  - on a CPU the ranks share the cores: compute stretches by ranks x threads / cores.
struct StepPrediction {
  double step_s = 0;
  double compute_s = 0;     // forward + backward on the busiest rank (without recompute)
  double recompute_s = 0;   // the extra forward
  double tp_comm_s = 0;     // tensor-parallel collectives on that rank
  double bubble_s = 0;      // the pipeline's idle time on that rank
  double dp_exposed_s = 0;  // data-parallel communication not hidden by compute
  double optimizer_s = 0, offload_s = 0;
  double tokens_per_s = 0, mfu = 0;
};
struct CostOptions {
  std::string precision = "fp32";  // the run's memory.precision
  int64_t batch = 1;               // global batch (sequences)
  double overlap = 0.5;  // share of a collective hidden behind concurrent compute (Gloo on
                         // CPU shares the cores; about 0.9 with NCCL on a GPU)
};
StepPrediction predict_step(const ModelSpec& spec, const Layout& layout, const CostOptions& o,
                            const HardwareProfile& hw);

}  // namespace strata
