#pragma once
#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <string>

namespace strata {

// Note [mixed precision]
// memory.precision = bf16 | fp16 chooses the half type of the compute. With
// memory.master_weights = true (the default, Megatron/DeepSpeed style) the model's
// parameters, and so its gradients and activations, are stored in the half type and
// the optimizer keeps an fp32 master copy that it steps and copies back: 2 + 2 bytes
// per parameter in the model, 12 in the optimizer (master, exp_avg, exp_avg_sq).
// With master_weights = false (PyTorch autocast style) parameters and gradients stay
// fp32 and only the compute is half. Both run the forward under autocast, which
// casts the inputs of matmuls and convolutions to the half type and runs the loss
// in fp32.
//
// Note [precision of sensitive ops]
// Softmax, layer norm and the loss must not lose range or precision:
// - the loss: logits are cast to fp32 before log-softmax (Gpt::head_loss, and
//   autocast's own fp32 policy for cross_entropy), as autocast does;
// - layer norm and softmax: libtorch's CPU and CUDA kernels accumulate half inputs
//   in fp32 (mean, variance, max, sum of exponentials) and round only their output,
//   which the next matmul would round to half anyway. That is Megatron's fused
//   mixed-precision layer norm and softmax; casting the input to fp32 first, as CUDA
//   autocast does for layer norm, would keep an fp32 copy of every normalised
//   activation for backward and give back most of the activation saving. A test
//   checks that layer norm of a half input equals the fp32 layer norm rounded.
// - BatchNorm modules keep fp32 parameters and running statistics (apex's
//   keep_batchnorm_fp32): a running variance in bf16 has 8 bits of mantissa.
enum class Precision { kFp32, kBf16, kFp16 };

Precision parse_precision(const std::string& name);  // fp32, bf16, fp16
const char* precision_name(Precision p);
// The compute type: kFloat, kBFloat16 or kHalf.
at::ScalarType compute_dtype(Precision p);

// Runs a small forward and backward (matmul, layer norm, attention, cross-entropy)
// in the precision on the device; when the device cannot, one Error line naming the
// precision, the device, the reason and the alternatives.
void check_precision_supported(Precision p, const at::Device& device);

// Converts a model's floating parameters and buffers to dtype in place, except
// BatchNorm modules (see Note [precision of sensitive ops]).
void cast_model(torch::nn::Module& model, at::ScalarType dtype);

// What autocast is doing on this thread for one device type: captured at a forward,
// re-established for its recomputation (see recompute.h).
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;
  static AutocastState current(c10::DeviceType device);
};

// Enables autocast with dtype on the device type for its lifetime (a no-op for
// kFloat), restoring the previous state and clearing autocast's weight-cast cache
// when the outermost scope ends.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, at::ScalarType dtype);
  AutocastScope(c10::DeviceType device, const AutocastState& state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  AutocastState prev_;
  bool active_ = false;
};

}  // namespace strata
