#include "strata/memory/precision.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>

#include "strata/core/errors.h"

namespace strata {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  STRATA_FAIL("memory.precision=", name, " is not a precision; use fp32, bf16 or fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

at::ScalarType compute_dtype(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return at::kBFloat16;
    case Precision::kFp16:
      return at::kHalf;
    case Precision::kFp32:
      break;
  }
  return at::kFloat;
}

void check_precision_supported(Precision p, const at::Device& device) {
  if (p == Precision::kFp32) return;
  const at::ScalarType dt = compute_dtype(p);
  try {
    // The ops a transformer step needs, forward and backward, at a tiny size.
    at::AutoGradMode grad(true);
    auto opts = at::TensorOptions().dtype(dt).device(device);
    at::Tensor w = at::randn({8, 8}, opts).requires_grad_(true);
    at::Tensor x = at::randn({1, 2, 4, 8}, opts);
    at::Tensor h = at::layer_norm(at::matmul(x, w), {8});
    h = at::scaled_dot_product_attention(h, h, h, {}, 0.0, /*is_causal=*/true);
    at::Tensor loss = at::cross_entropy_loss(h.reshape({-1, 8}).to(at::kFloat),
                                             at::zeros({8}, opts.dtype(at::kLong)));
    loss.backward();
    STRATA_CHECK(w.grad().defined() && w.grad().scalar_type() == dt, "no ", precision_name(p),
                 " gradient came back");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    STRATA_FAIL(
        "memory.precision=", precision_name(p), " cannot run on ", device.str(), " (", why,
        "); use memory.precision=", p == Precision::kFp16 ? "bf16 or fp32" : "fp16 or fp32");
  }
}

void cast_model(torch::nn::Module& model, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  for (auto& m : model.modules(/*include_self=*/true)) {
    if (m->as<torch::nn::BatchNorm1d>() || m->as<torch::nn::BatchNorm2d>() ||
        m->as<torch::nn::BatchNorm3d>())
      continue;
    // Direct members only: every module is visited once.
    for (auto& p : m->named_parameters(/*recurse=*/false))
      if (p.value().is_floating_point()) p.value().set_data(p.value().to(dtype));
    for (auto& b : m->named_buffers(/*recurse=*/false))
      if (b.value().is_floating_point()) b.value().set_data(b.value().to(dtype));
  }
}

AutocastState AutocastState::current(c10::DeviceType device) {
  return {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
}

AutocastScope::AutocastScope(c10::DeviceType device, at::ScalarType dtype)
    : AutocastScope(device, AutocastState{dtype != at::kFloat, dtype}) {}

AutocastScope::AutocastScope(c10::DeviceType device, const AutocastState& state)
    : device_(device), prev_(AutocastState::current(device)) {
  if (!state.enabled) return;
  active_ = true;
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, state.dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The cache holds half copies of fp32 weights for this forward; the outermost
  // scope drops them (as torch.autocast's __exit__ does).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_.enabled);
  at::autocast::set_autocast_dtype(device_, prev_.dtype);
}

}  // namespace strata
