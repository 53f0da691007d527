#include "strata/cli/machine_bench.h"

#include <algorithm>

#include "strata/models/dropout.h"
#include "strata/models/transformer.h"
#include "strata/optim/adamw.h"

namespace strata {

std::vector<GemmPoint> gemm_curve(at::ScalarType dtype, int64_t largest, bool quick) {
  std::vector<int64_t> sizes;
  for (int64_t n = 64; n <= largest; n *= quick ? 4 : 2) sizes.push_back(n);
  std::vector<GemmPoint> out;
  sweep_until_slow(sizes, [&](int64_t n) {
    // A transformer's shapes are (tokens x d) by (d x 4d) and the like: rectangular,
    // here (2n x n) by (n x 2n).
    const at::Tensor a = at::randn({2 * n, n}).to(dtype), b = at::randn({n, 2 * n}).to(dtype);
    const double s = median_seconds([&] { (void)at::mm(a, b); }, quick ? 2 : 3, quick ? 0.05 : 0.3);
    out.push_back({2.0 * (2 * n) * n * (2 * n), s});
    return s;
  });
  return out;
}

std::vector<int64_t> calibrated_worlds(int64_t nproc) {
  std::vector<int64_t> out;
  for (int64_t g = 1; g < nproc; g *= 2) out.push_back(g);
  out.push_back(nproc);
  return out;
}

double memory_bandwidth(bool quick) {
  const int64_t n = quick ? (4 << 20) : (32 << 20);  // floats: 16 or 128 MiB
  const at::Tensor a = at::randn({n});
  at::Tensor b = at::empty_like(a);
  const double s = median_seconds([&] { b.copy_(a); }, 3, quick ? 0.05 : 0.3);
  return 2.0 * static_cast<double>(a.nbytes()) / s;  // read + write
}

namespace {
// Forward and backward of `out_of(x)` with x's gradient: the time one call of the
// kernel costs in a training step.
// Note [dense gradients in calibration]: backward starts from a dense gradient of the
// output, as in a step. It used to start from a sum's, a zero-stride expanded tensor,
// which a linear's backward multiplies through a slower path ((128 x 64) -> 256: 0.18
// ms against 0.135) and element-wise backwards read for free. The linear curve came out
// 20-35% slow at a short sequence's shapes and the step scale hid it at micro-batch 4,
// so micro-batch 1 was priced 1.3-1.4x what it runs at (one rank, batch 8: bert-debug
// +38.6% at micro-batch 1 and +8.7% at 8, the debug GPT +33.4% and +12.6%; after,
// +9.9% and +9.9%, +4.3% and +9.5%).
template <class Fn>
double fwd_bwd_seconds(const at::Tensor& x, Fn out_of, bool quick) {
  const at::Tensor grad = at::randn_like(out_of(x).detach());
  return median_seconds(
      [&] {
        x.mutable_grad() = at::Tensor();
        out_of(x).backward(grad);
      },
      quick ? 2 : 3, quick ? 0.03 : 0.15);
}
}  // namespace

// Note [AdamW past the caches]: the update makes seven passes over each tensor and its
// moments, so its rate per element depends on whether a shard's parameters, gradients
// and moments stay in the caches from one step to the next. The curve stopped at 1 Mi
// elements (16 MiB of state), and a model of 17 M parameters (the d384 GPT) took its
// update at that rate: on one rank its optimizer's phase (the update, the gradient
// norm, the zeroing) was priced 45.6 ms against 91.5 measured, and in chain c19 all 12
// of its 4-rank layouts ran over their price (median 12.1%). So the curve goes on to
// 16 Mi elements (256 MiB of state), where this machine's rate was 2.5 ns per element
// against 1.6 at 1 Mi, in tensors no larger than a d x 4d weight of a mid-sized model
// (256 Ki elements), as a model holds them: the same phase is now priced 68 ms.
std::vector<AdamWShape> adamw_calibration_shapes(bool quick) {
  const std::vector<int64_t> sizes = quick
                                         ? std::vector<int64_t>{1 << 16}
                                         : std::vector<int64_t>{1 << 16, 1 << 20, 1 << 22, 1 << 24};
  std::vector<AdamWShape> out;
  for (const int64_t n : sizes) out.push_back({n, std::min<int64_t>(n / 4, kAdamWLargestTensor)});
  return out;
}

// Note [kernel calibration]: the non-GEMM kernels of a transformer step timed forward
// and backward as the model calls them, at sizes from one short sequence to a large
// micro-batch: element-wise bandwidth alone misprices them (exp and erf are
// compute-bound on CPUs; the loss's backward writes a full gradient of the logits).
std::map<std::string, std::vector<KernelPoint>> kernel_curves(bool quick) {
  std::map<std::string, std::vector<KernelPoint>> out;
  const std::vector<int64_t> rows =
      quick ? std::vector<int64_t>{64, 1024} : std::vector<int64_t>{64, 256, 1024, 4096};
  auto grad_of = [](at::Tensor t) { return t.requires_grad_(true); };
  for (const int64_t r : rows) {  // the loss over a vocabulary of 8192
    const at::Tensor x = grad_of(at::randn({r, 8192}));
    const at::Tensor target = at::randint(8192, {r}, at::kLong);
    const double s = fwd_bwd_seconds(
        x, [&](const at::Tensor& v) { return at::cross_entropy_loss(v, target); }, quick);
    out["cross_entropy"].push_back({static_cast<double>(x.numel()), s});
  }
  for (const auto& [dtype, name] :
       {std::pair{at::kFloat, "fp32"}, std::pair{at::kBFloat16, "bf16"}}) {
    // Rows of a 384-wide stream (the MLP's 1536 for GELU); each row count's slowest
    // kernel decides the stop (Note [slow dtypes in calibration]), as below.
    sweep_until_slow(rows, [&](int64_t r) {
      const at::Tensor x = grad_of(at::randn({r, 384}).to(dtype));
      const at::Tensor w = at::ones({384}, dtype), b = at::zeros({384}, dtype);
      const double norm = fwd_bwd_seconds(
          x, [&](const at::Tensor& v) { return at::layer_norm(v, {384}, w, b); }, quick);
      out[std::string("layer_norm/") + name].push_back({static_cast<double>(x.numel()), norm});
      const at::Tensor h = grad_of(at::randn({r, 1536}).to(dtype));
      const double gelu = fwd_bwd_seconds(
          h, [&](const at::Tensor& v) { return at::gelu(v); }, quick);
      out[std::string("gelu/") + name].push_back({static_cast<double>(h.numel()), gelu});
      // The residual stream's dropout (the model's own, Note [counter-based dropout]):
      // its hash per element is compute, not traffic.
      const double dropout = fwd_bwd_seconds(
          x, [&](const at::Tensor& v) { return counter_dropout(v, 0.1, true); }, quick);
      out[std::string("dropout/") + name].push_back({static_cast<double>(x.numel()), dropout});
      return std::max({norm, gelu, dropout});
    });
    // Causal attention over (1, 4 heads, T, 32) for growing T, per head; work counts
    // forward's 4 T^2 d and backward's 8 T^2 d FLOPs (the full square, as the cost
    // model does).
    const std::vector<int64_t> lengths =
        quick ? std::vector<int64_t>{128, 512} : std::vector<int64_t>{64, 128, 256, 512, 1024};
    sweep_until_slow(lengths, [&](int64_t t) {
      const at::Tensor q = grad_of(at::randn({1, 4, t, 32}).to(dtype));
      const at::Tensor k = at::randn({1, 4, t, 32}).to(dtype),
                       v = at::randn({1, 4, t, 32}).to(dtype);
      const double s = fwd_bwd_seconds(
          q,
          [&](const at::Tensor& x) {
            return at::scaled_dot_product_attention(x, k, v, {}, 0.0, true);
          },
          quick);
      out[std::string("attention/") + name].push_back(
          {12 * static_cast<double>(t * t) * 32, s / 4});
      // With dropout the model writes attention out (scores, softmax, the
      // probabilities' dropout, x V): its own core, timed the same way.
      BlockShape shape;
      shape.d_model = 128, shape.n_head = 4, shape.dropout = 0.1;
      SelfAttention dropped(shape);
      const double sd = fwd_bwd_seconds(
          q, [&](const at::Tensor& x) { return dropped.core(x, k, v); }, quick);
      out[std::string("attention_dropout/") + name].push_back(
          {12 * static_cast<double>(t * t) * 32, sd / 4});
      return std::max(s, sd);
    });
    // A linear layer (tokens x d) -> 4d with its bias, forward and backward (input,
    // weight and bias gradients): thin transformer shapes run well below a square
    // multiply's rate. Work: its 6 N d 4d FLOPs.
    using Shape = std::pair<int64_t, int64_t>;
    const std::vector<Shape> shapes =
        quick ? std::vector<Shape>{{128, 128}, {2048, 128}}
              : std::vector<Shape>{{64, 64},    {128, 64},   {128, 128},  {512, 128},
                                   {2048, 128}, {2048, 256}, {8192, 256}, {8192, 512}};
    sweep_until_slow(shapes, [&](const Shape& shape) {
      const auto [n, d] = shape;
      const at::Tensor x = grad_of(at::randn({n, d}).to(dtype));
      const at::Tensor w = grad_of(at::randn({4 * d, d}).to(dtype)),
                       b = grad_of(at::zeros({4 * d}).to(dtype));
      const double s = fwd_bwd_seconds(
          x, [&](const at::Tensor& v) { return at::linear(v, w, b); }, quick);
      out[std::string("linear/") + name].push_back({6.0 * static_cast<double>(n * d * 4 * d), s});
      return s;
    });
  }
  // AdamW's update of fp32 parameters, per element (Note [AdamW past the caches]).
  for (const AdamWShape& shape : adamw_calibration_shapes(quick)) {
    const int64_t n = shape.elements;
    std::vector<NamedParam> params;
    for (int64_t i = 0; i < n / shape.per_tensor; ++i) {
      at::Tensor w = at::randn({shape.per_tensor});
      w.mutable_grad() = at::randn({shape.per_tensor});
      params.push_back({"w" + std::to_string(i), w});
    }
    AdamW opt(params, {});
    out["adamw"].push_back(
        {static_cast<double>(n), median_seconds([&] { opt.step(1e-4); }, 3, quick ? 0.03 : 0.15)});
  }
  return out;
}

// One small op's forward and backward: a chain of multiplies on 8 floats.
double op_overhead(bool quick) {
  const at::Tensor x = at::randn({8}).requires_grad_(true);
  constexpr int kOps = 64;
  const double s = median_seconds(
      [&] {
        at::Tensor y = x;
        for (int i = 0; i < kOps; ++i) y = y * 1.0001;
        y.backward(at::ones_like(y));
      },
      3, quick ? 0.03 : 0.15);
  return s / kOps;
}

// Note [contention]: ranks of a CPU run share the machine's cores, caches and memory
// bandwidth, so each computes slower than one alone, and not by a ratio of cores
// (hyper-threads, turbo, bandwidth-bound kernels). The same compute mix (a linear
// layer, a loss over a vocabulary, GELU) is timed by one process alone and by g ranks
// at once; the ratio is the profile's contention for g ranks.
double compute_mix_seconds(bool quick) {
  const at::Tensor x = at::randn({1024, 128}).requires_grad_(true);
  const at::Tensor w = at::randn({512, 128}).requires_grad_(true);
  const at::Tensor logits = at::randn({256, 8192}).requires_grad_(true);
  const at::Tensor target = at::randint(8192, {256}, at::kLong);
  return median_seconds(
      [&] {
        at::Tensor h = at::gelu(at::linear(x, w));
        (h.sum() + at::cross_entropy_loss(logits, target)).backward();
      },
      quick ? 3 : 7, quick ? 0.05 : 0.3);
}

}  // namespace strata
