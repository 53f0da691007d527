#pragma once
#include <ATen/Tensor.h>
#include <torch/nn/module.h>

namespace strata {

// Note [counter-based dropout]
// On CPU, libtorch's dropout draws every mask element from the Mersenne twister under
// the generator's lock: at sequence 512 the attention-probability dropout alone took
// ~40% of a GPT-2 block's forward, and every recomputed forward paid it again. Here
// the mask is a pure function of (seed, element index) — splitmix64's output at that
// index, 24 bits compared with p * 2^24, the resolution of the float uniform
// PyTorch's bernoulli compares — computed in parallel, and one 64-bit seed is drawn
// from the default generator per call. So:
// - the mask is not stored: backward recomputes it from the seed (as fused GPU
//   attention kernels do with Philox), saving one byte per element of activations;
// - recompute (Note [activation recompute]) replays the generator, so a recomputed
//   forward draws the same seed and the same mask;
// - resume restores the generator, so masks continue bitwise.
// CUDA tensors use libtorch's dropout (Philox already).
//
// A tensor-parallel rank holds a slice of a tensor along one dimension (its heads of
// the attention probabilities); keyed on the element's index in the *global* tensor,
// its mask is exactly the slice of the mask one process draws, so a tp run with dropout
// equals the tp = 1 run (Megatron's RNG tracker cannot give that).
struct DropoutSlice {
  int64_t dim = -1;    // -1: x is the whole tensor
  int64_t global = 0;  // the global extent of dim
  int64_t offset = 0;  // where x's slice starts in it
};
at::Tensor counter_dropout(const at::Tensor& x, double p, bool train, DropoutSlice slice = {});

// The module form, in place of torch::nn::Dropout.
class Dropout : public torch::nn::Module {
 public:
  explicit Dropout(double p) : p_(p) {}
  at::Tensor forward(const at::Tensor& x, DropoutSlice slice = {}) {
    return counter_dropout(x, p_, is_training(), slice);
  }
  double p() const { return p_; }

 private:
  double p_;
};

// The mask kernel alone (for tests): out = keep(i) ? x * scale : 0 with
// keep(i) = (splitmix64(seed, i) >> 40) >= ceil(p * 2^24).
at::Tensor dropout_with_seed(const at::Tensor& x, double p, uint64_t seed, DropoutSlice slice = {});

}  // namespace strata
