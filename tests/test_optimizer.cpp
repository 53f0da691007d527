#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include "strata/optim/adamw.h"

using namespace strata;

// Strata's AdamW against libtorch's own torch::optim::AdamW on the same tensors.
TEST(AdamW, MatchesLibtorchAdamW) {
  at::manual_seed(0);
  at::Tensor w0 = at::randn({8, 5}), b0 = at::randn({5});
  at::Tensor w1 = w0.clone().requires_grad_(), b1 = b0.clone().requires_grad_();
  at::Tensor w2 = w0.clone().requires_grad_(), b2 = b0.clone().requires_grad_();
  AdamW mine({{"w", w1}, {"b", b1}}, AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  // Strata decays matrices only; libtorch gets two groups to match.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<at::Tensor>{w2},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(
      std::vector<at::Tensor>{b2},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW ref(std::move(groups), torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < 10; ++step) {
    at::Tensor x = at::randn({3, 8});
    for (auto [w, b] : {std::pair{w1, b1}, std::pair{w2, b2}}) {
      if (w.grad().defined()) w.mutable_grad().zero_(), b.mutable_grad().zero_();
      ((at::mm(x, w) + b).pow(2).sum()).backward();
    }
    mine.step(1e-2);
    ref.step();
  }
  EXPECT_TRUE(at::allclose(w1, w2, 1e-6, 1e-7)) << (w1 - w2).abs().max();
  EXPECT_TRUE(at::allclose(b1, b2, 1e-6, 1e-7)) << (b1 - b2).abs().max();
  EXPECT_FALSE(at::allclose(w1, w0));
}

TEST(LrSchedule, WarmupThenCosineToMin) {
  EXPECT_DOUBLE_EQ(lr_at(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(lr_at(55, 100, 10, 1.0, 0.1), 0.55, 1e-12);
  EXPECT_NEAR(lr_at(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
  for (int s = 11; s < 100; ++s)
    EXPECT_LE(lr_at(s, 100, 10, 1.0, 0.1), lr_at(s - 1, 100, 10, 1.0, 0.1));
}

TEST(GradClip, NormAndScale) {
  at::Tensor a = at::zeros({2}).requires_grad_(), b = at::zeros({1}).requires_grad_();
  a.mutable_grad() = at::tensor({3.0f, 0.0f});
  b.mutable_grad() = at::tensor({4.0f});
  std::vector<NamedParam> ps{{"a", a}, {"b", b}};
  EXPECT_DOUBLE_EQ(grad_norm_squared(ps), 25.0);
  AdamW(ps, {}).step(/*lr=*/0.0, /*grad_scale=*/0.5);  // scales fp32 gradients in place
  EXPECT_DOUBLE_EQ(grad_norm_squared(ps), 6.25);
}

// Note [multi-tensor AdamW]: the chunked _foreach path (CUDA's default) computes what
// the per-tensor loop computes, element for element: fp32, bf16 with fp32 masters,
// decayed and undecayed tensors, a tensor without a gradient (its step stays behind,
// so later chunks split by step count), loss-scale factor and a chunk split by size.
TEST(AdamW, MultiTensorChunksEqualThePerTensorLoop) {
  for (bool half : {false, true}) {
    at::manual_seed(1);
    const auto dtype = half ? at::kBFloat16 : at::kFloat;
    const std::vector<std::vector<int64_t>> shapes = {
        {64, 32}, {32}, {kForeachChunkElements / 4096 + 1, 4096}, {16, 16}, {7}};
    std::vector<NamedParam> a, b;
    for (size_t k = 0; k < shapes.size(); ++k) {
      at::Tensor w = at::randn(shapes[k]).to(dtype);
      a.push_back({"p" + std::to_string(k), w.clone().requires_grad_()});
      b.push_back({"p" + std::to_string(k), w.clone().requires_grad_()});
    }
    AdamWOptions loop_opts, multi_opts;
    loop_opts.foreach = 0;
    multi_opts.foreach = 1;
    AdamW loop(a, loop_opts, /*master_weights=*/half), multi(b, multi_opts, half);
    for (int step = 0; step < 4; ++step) {
      for (size_t k = 0; k < shapes.size(); ++k) {
        // The last tensor gets no gradient in step 1.
        at::Tensor g =
            step == 0 && k + 1 == shapes.size() ? at::Tensor() : at::randn(shapes[k]).to(dtype);
        a[k].param.mutable_grad() = g.defined() ? g.clone() : g;
        b[k].param.mutable_grad() = g.defined() ? g.clone() : g;
      }
      loop.step(1e-2, 0.5);
      multi.step(1e-2, 0.5);
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      EXPECT_TRUE(at::equal(a[k].param, b[k].param)) << "half " << half << " tensor " << k;
      EXPECT_TRUE(at::equal(loop.state()[k].exp_avg_sq, multi.state()[k].exp_avg_sq)) << k;
      EXPECT_EQ(loop.state()[k].step, multi.state()[k].step) << k;
    }
  }
}
