#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/config.h"
#include "strata/models/flavours.h"
#include "strata/plan/layouts.h"
#include "strata/plan/profile.h"

namespace strata {

// Note [cost model]: a training step's time for a transformer layout on a hardware
// profile, from the work each rank does:
//  - compute, per micro-batch and part (predict_parts): the linears at the profile's
//    linear-layer rate for their FLOPs (tp splits their output or input features), the
//    calibrated kernels (attention's fused kernel per head, norms, GELU, the fp32
//    cross-entropy over this rank's vocabulary; bytes over the bandwidth when the
//    profile lacks them), the remaining element-wise bytes, and the op overhead times
//    the part's op count (Note [op counts]); recompute's extra forward (full: the
//    blocks; selective: attention's core);
//  - tensor parallel, on the critical path: four all-reduces per block (sequence
//    parallel: six all-gathers, four reduce-scatters and the replicated parameters'
//    six small all-reduces) and the vocabulary-parallel ends';
//  - the pipeline: the schedule itself simulated (simulate_schedule) with each stage's
//    forward and backward cost per micro-batch and the activations' send time, so the
//    bubble is that of the real schedule, partition and chunks;
//  - data parallel after the last backward: DDP's all-reduce and ZeRO-1/2's
//    reduce-scatter, of which the overlap fraction hides behind the last micro-batch's
//    backward (0 on Gloo/CPU: its threads need the cores compute holds); ZeRO's
//    all-gather of the updated parameters; ZeRO-3's per-block gathers and
//    reduce-scatters each micro-batch, hidden by prefetch up to the overlap fraction;
//  - the optimizer: the AdamW kernel (or its traffic) over this rank's (sharded)
//    parameters, the norm's read and the zeroing; offload's copies over the host link
//    (none on a CPU, where host memory is the device's);
//  - on a CPU the ranks share the machine: compute stretches by the measured
//    contention of the ranks computing at once (Note [contention]), and the whole step
//    by the reference run's step scale (Note [step calibration]).
struct StepPrediction {
  double step_s = 0;
  double compute_s = 0;     // forward + backward on the busiest rank (without recompute)
  double recompute_s = 0;   // the extra forward
  double tp_comm_s = 0;     // tensor-parallel collectives on that rank
  double bubble_s = 0;      // the pipeline's idle time on that rank
  double dp_exposed_s = 0;  // data-parallel communication not hidden by compute, and ZeRO's copies
  double optimizer_s = 0, offload_s = 0;
  double tokens_per_s = 0, mfu = 0;
};
// Factors on a micro-batch's predicted parts (forward, backward, recompute; not their
// collectives), from timing the model's own parts on this machine (Note [measured
// parts]); 1 where nothing was timed.
struct PartScale {
  double block = 1, first = 1, last = 1;
};
struct CostOptions {
  CostOptions() = default;
  CostOptions(std::string precision_, int64_t batch_, double overlap_)
      : precision(std::move(precision_)), batch(batch_), overlap(overlap_) {}
  std::string precision = "fp32";  // the run's memory.precision
  int64_t batch = 1;               // global batch (sequences)
  double overlap = 0.5;  // share of a collective hidden behind concurrent compute (Gloo on
                         // CPU shares the cores; about 0.9 with NCCL on a GPU)
  std::map<int64_t, PartScale> part_scale;  // by micro-batch; empty: the kernels' sum alone
  // The machine's time now over the profile's (Note [the machine now]): every term of a
  // step is multiplied by it; 1: the machine as calibrated.
  double speed = 1.0;
  // DDP's bucket caps (parallel.first_bucket_mb, parallel.bucket_cap_mb) in bytes, the
  // config's defaults unless set: one all-reduce per bucket (Note [DDP's buckets priced
  // as issued]).
  double first_bucket_bytes = ParallelConfig{}.first_bucket_mb * (1 << 20);
  double bucket_cap_bytes = ParallelConfig{}.bucket_cap_mb * (1 << 20);
};
// One micro-batch's parts on one rank with the machine to itself (before the cores
// are shared): a block, the first stage's embedding, the last stage's head and loss.
// Forward and backward exclude tensor-parallel communication, given apart: each part's
// collectives in all (*_tp_comm) and the forward's share of them (*_tp_forward), which
// full recompute replays (Note [recompute's collectives]).
struct PartCosts {
  double block_forward = 0, block_backward = 0, block_recompute = 0, block_tp_comm = 0,
         block_tp_forward = 0;
  double first_forward = 0, first_backward = 0, first_tp_comm = 0, first_tp_forward = 0;
  double last_forward = 0, last_backward = 0, last_tp_comm = 0, last_tp_forward = 0;
};
PartCosts predict_parts(const ModelSpec& spec, const Layout& layout, const CostOptions& o,
                        const HardwareProfile& hw);
// The options a run of cfg is priced with on hw: its precision and global batch, and
// the overlap its backend achieves (0.9 on NCCL; none on Gloo/CPU, whose comm threads
// need the cores compute holds).
CostOptions cost_options(const Config& cfg, const HardwareProfile& hw);
StepPrediction predict_step(const ModelSpec& spec, const Layout& layout, const CostOptions& o,
                            const HardwareProfile& hw);
// The tensor-parallel collectives' seconds a step on pipeline rank `stage` (its chunks'
// blocks and ends over the step's micro-batches, full recompute's replay), as
// predict_step prices them: what that rank's own comm timers measure in a run (Note [a
// pipeline's tp pair in a run] fits to rank 0's).
double stage_tp_comm_seconds(const ModelSpec& spec, const Layout& layout, const CostOptions& o,
                             const HardwareProfile& hw, int64_t stage);
// Note [DDP's buckets priced as issued]: the sizes of the all-reduces DDP issues for
// `grad_bytes` of gradients: the first bucket closes at first_cap, every later one at
// cap, the last takes what remains (the parameters' own boundaries, which can carry a
// bucket past its cap, are not modelled). Empty for no gradients.
std::vector<double> ddp_bucket_bytes(double grad_bytes, double first_cap, double cap);
// Note [ZeRO collectives in a loaded world]: whether the profile's zero_collective_scale
// prices the layout's ZeRO collectives (ZeRO on a dp group as large as the world); the
// cost model prices with it and calibrate fits it under this one condition.
bool takes_zero_collective_scale(const Layout& l);

}  // namespace strata
