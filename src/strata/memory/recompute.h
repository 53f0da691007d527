#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata {

// Note [activation recompute]
// A recomputed segment keeps only its input: its forward runs without recording a
// graph, and backward reruns it with the graph on and differentiates that. Modes
// (memory.recompute):
// - full: every block is its own segment (one block input kept per block);
// - every-k: segments of k consecutive blocks (the last may be shorter);
// - sqrt: segments of ceil(sqrt(L)) blocks (Chen et al. 2016): L/k segment inputs
//   plus one segment's activations in backward, O(sqrt L) at k = sqrt L;
// - selective: blocks are not segmented; inside each attention only the core
//   (scores, softmax, dropout, x V) is recomputed (Korthikanti et al. 2022): the
//   s^2 terms, for a few percent of the compute.
// The recomputation restores the forward's RNG state (CPU, and CUDA for CUDA inputs)
// so dropout draws the same masks, re-establishes its autocast state, and puts
// back the buffers its modules changed (BatchNorm's running statistics are updated
// once per step, as without recompute). Gradients equal those without recompute.
//
// It is written as a torch::autograd::Function whose backward calls
// torch::autograd::grad on the rebuilt segment (not backward()), so parameter
// gradients leave through the Function's own edges into the outer graph's
// AccumulateGrad nodes: DDP's ready hooks and final callback see one ordinary
// backward, and ZeRO-3 can gather parameters again inside the segment's function.
enum class RecomputeMode { kNone, kFull, kEveryK, kSqrt, kSelective };

RecomputeMode parse_recompute(const std::string& name);
const char* recompute_name(RecomputeMode m);

struct Segment {
  int64_t begin = 0, end = 0;  // blocks [begin, end)
  bool recompute = false;
};
// The block segments of a mode over num_blocks blocks (pure). every-k needs
// 1 <= k <= num_blocks; none and selective give one plain segment of all blocks.
std::vector<Segment> recompute_segments(RecomputeMode mode, int64_t num_blocks, int64_t k);

// Runs fn(inputs) keeping only inputs (and fn's output) for backward; see the Note.
// params: the tensors fn reads whose gradients are wanted (fn uses them directly);
// buffers: tensors fn may change in place that its recomputation must not change again.
using SegmentFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
at::Tensor recompute_checkpoint(SegmentFn fn, const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& params,
                                const std::vector<at::Tensor>& buffers);

}  // namespace strata
