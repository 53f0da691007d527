#include "strata/models/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

namespace strata {

namespace {

// splitmix64 (Steele, Lea & Flood 2014): the i-th output of the sequence from seed.
inline uint64_t splitmix64(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr int64_t kGrain = 1 << 15;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class DropoutFunction : public torch::autograd::Function<DropoutFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p, int64_t seed) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return dropout_with_seed(x, p, static_cast<uint64_t>(seed));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const double p = ctx->saved_data["p"].toDouble();
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    return {dropout_with_seed(grad[0], p, seed), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor dropout_with_seed(const at::Tensor& x, double p, uint64_t seed) {
  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const auto threshold = static_cast<uint64_t>(std::ceil(p * static_cast<double>(1 << 24)));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "dropout", [&] {
    const scalar_t* src = in.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, in.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const bool keep = (splitmix64(seed, static_cast<uint64_t>(i)) >> 40) >= threshold;
        dst[i] = keep ? static_cast<scalar_t>(static_cast<float>(src[i]) * scale) : scalar_t(0);
      }
    });
  });
  return out;
}

at::Tensor counter_dropout(const at::Tensor& x, double p, bool train) {
  if (!train || p == 0) return x;
  if (!x.is_cpu() || p >= 1) return at::dropout(x, p, train);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  return DropoutFunction::apply(x, p, static_cast<int64_t>(seed));
}

}  // namespace strata
