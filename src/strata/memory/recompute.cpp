#include "strata/memory/recompute.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <cmath>

#include "strata/core/errors.h"
#include "strata/memory/precision.h"

namespace strata {

RecomputeMode parse_recompute(const std::string& name) {
  if (name == "none") return RecomputeMode::kNone;
  if (name == "full") return RecomputeMode::kFull;
  if (name == "every-k") return RecomputeMode::kEveryK;
  if (name == "sqrt") return RecomputeMode::kSqrt;
  if (name == "selective") return RecomputeMode::kSelective;
  STRATA_FAIL("memory.recompute=", name,
              " is not a recompute mode; use none, full, every-k, sqrt or selective");
}

const char* recompute_name(RecomputeMode m) {
  switch (m) {
    case RecomputeMode::kNone:
      return "none";
    case RecomputeMode::kFull:
      return "full";
    case RecomputeMode::kEveryK:
      return "every-k";
    case RecomputeMode::kSqrt:
      return "sqrt";
    case RecomputeMode::kSelective:
      return "selective";
  }
  return "?";
}

std::vector<Segment> recompute_segments(RecomputeMode mode, int64_t num_blocks, int64_t k) {
  if (num_blocks <= 0) return {};
  switch (mode) {
    case RecomputeMode::kNone:
    case RecomputeMode::kSelective:
      return {{0, num_blocks, false}};
    case RecomputeMode::kFull:
      k = 1;
      break;
    case RecomputeMode::kEveryK:
      STRATA_CHECK(k >= 1 && k <= num_blocks, "memory.recompute_k=", k,
                   " must be between 1 and the model's ", num_blocks,
                   " blocks; choose recompute_k in [1, ", num_blocks, "]");
      break;
    case RecomputeMode::kSqrt:
      k = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(num_blocks))));
      break;
  }
  std::vector<Segment> out;
  for (int64_t b = 0; b < num_blocks; b += k) out.push_back({b, std::min(b + k, num_blocks), true});
  return out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Everything the recomputation needs besides the saved inputs.
struct Closure : torch::CustomClassHolder {
  SegmentFn fn;
  std::vector<at::Tensor> params, buffers;
  std::vector<bool> input_requires_grad;
  c10::DeviceType device = c10::DeviceType::CPU;
  AutocastState autocast;
  std::vector<std::pair<at::Generator, at::Tensor>> rng;  // generator, state at the forward
};

std::vector<at::Generator> generators_for(const at::Device& device) {
  std::vector<at::Generator> out{at::detail::getDefaultCPUGenerator()};
  if (!device.is_cpu()) out.push_back(at::globalContext().defaultGenerator(device));
  return out;
}

at::Tensor generator_state(at::Generator& g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void set_generator_state(at::Generator& g, const at::Tensor& s) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(s);
}

// Puts the forward's RNG states in place for its lifetime, then the current ones back.
class RngReplay {
 public:
  explicit RngReplay(std::vector<std::pair<at::Generator, at::Tensor>>& saved) : saved_(saved) {
    for (auto& [gen, state] : saved_) {
      now_.push_back(generator_state(gen));
      set_generator_state(gen, state);
    }
  }
  ~RngReplay() {
    for (size_t i = 0; i < saved_.size(); ++i) set_generator_state(saved_[i].first, now_[i]);
  }

 private:
  std::vector<std::pair<at::Generator, at::Tensor>>& saved_;
  std::vector<at::Tensor> now_;
};

class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, at::TensorList /*params*/,
                            c10::intrusive_ptr<Closure> c) {
    const at::Device device = inputs.empty() ? at::Device(at::kCPU) : inputs[0].device();
    c->device = device.type();
    c->autocast = AutocastState::current(device.type());
    for (auto& g : generators_for(device)) c->rng.emplace_back(g, generator_state(g));
    for (const auto& x : inputs) c->input_requires_grad.push_back(x.requires_grad());
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["closure"] = c10::IValue::make_capsule(c);
    // Autograd is below this Function: nothing inside fn is recorded or kept.
    return c->fn(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto c = c10::static_intrusive_pointer_cast<Closure>(ctx->saved_data["closure"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    variable_list wrt;
    for (size_t i = 0; i < saved.size(); ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(c->input_requires_grad[i]));
      if (c->input_requires_grad[i]) wrt.push_back(inputs.back());
    }
    for (const auto& p : c->params)
      if (p.requires_grad()) wrt.push_back(p);

    std::vector<at::Tensor> buffers_before;
    for (const auto& b : c->buffers) buffers_before.push_back(b.clone());
    at::Tensor out;
    {
      RngReplay rng(c->rng);
      AutocastScope autocast(c->device, c->autocast);
      at::AutoGradMode grad_on(true);
      out = c->fn(inputs);
    }
    variable_list grads;
    if (out.requires_grad() && !wrt.empty() && grad_out[0].defined())
      grads = torch::autograd::grad({out}, wrt, {grad_out[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    {
      // After the backward: BatchNorm's backward reads the saved running statistics.
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < c->buffers.size(); ++i) c->buffers[i].copy_(buffers_before[i]);
    }
    // One gradient per forward argument: inputs, params, then none for the closure.
    variable_list result;
    size_t g = 0;
    auto next = [&] { return grads.empty() ? at::Tensor() : grads[g++]; };
    for (size_t i = 0; i < saved.size(); ++i)
      result.push_back(c->input_requires_grad[i] ? next() : at::Tensor());
    for (const auto& p : c->params) result.push_back(p.requires_grad() ? next() : at::Tensor());
    result.emplace_back();
    return result;
  }
};

}  // namespace

at::Tensor recompute_checkpoint(SegmentFn fn, const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& params,
                                const std::vector<at::Tensor>& buffers) {
  // Without a graph to build (no_grad, evaluation) there is nothing to save.
  if (!at::GradMode::is_enabled()) return fn(inputs);
  auto c = c10::make_intrusive<Closure>();
  c->fn = std::move(fn);
  c->params = params;
  c->buffers = buffers;
  return RecomputeFunction::apply(at::TensorList(inputs), at::TensorList(params), c);
}

}  // namespace strata
