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
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p, int64_t seed,
                            int64_t dim, int64_t global, int64_t offset) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["slice"] = std::vector<int64_t>{dim, global, offset};
    return dropout_with_seed(x, p, static_cast<uint64_t>(seed), {dim, global, offset});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const double p = ctx->saved_data["p"].toDouble();
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const auto sl = ctx->saved_data["slice"].toIntVector();
    return {dropout_with_seed(grad[0], p, seed, {sl[0], sl[1], sl[2]}),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor dropout_with_seed(const at::Tensor& x, double p, uint64_t seed, DropoutSlice slice) {
  at::Tensor in = x.contiguous();
  // Element i of x is element index(i) of the global tensor (Note [counter-based
  // dropout]): i = (o * local + l) * inner + r -> (o * global + offset + l) * inner + r.
  int64_t local = 1, inner = 1;
  if (slice.dim >= 0) {
    local = in.size(slice.dim);
    for (int64_t d = slice.dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  }
  const bool sliced = slice.dim >= 0 && local != slice.global;
  auto index = [&](int64_t i) -> uint64_t {
    if (!sliced) return static_cast<uint64_t>(i);
    const int64_t r = i % inner, ol = i / inner, l = ol % local, o = ol / local;
    return static_cast<uint64_t>((o * slice.global + slice.offset + l) * inner + r);
  };
  at::Tensor out = at::empty_like(in);
  const auto threshold = static_cast<uint64_t>(std::ceil(p * static_cast<double>(1 << 24)));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "dropout", [&] {
    const scalar_t* src = in.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, in.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const bool keep = (splitmix64(seed, index(i)) >> 40) >= threshold;
        dst[i] = keep ? static_cast<scalar_t>(static_cast<float>(src[i]) * scale) : scalar_t(0);
      }
    });
  });
  return out;
}

at::Tensor counter_dropout(const at::Tensor& x, double p, bool train, DropoutSlice slice) {
  if (!train || p == 0) return x;
  if (!x.is_cpu() || p >= 1) return at::dropout(x, p, train);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  return DropoutFunction::apply(x, p, static_cast<int64_t>(seed), slice.dim, slice.global,
                                slice.offset);
}

}  // namespace strata
