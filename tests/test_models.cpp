#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "strata/core/errors.h"
#include "strata/models/build.h"
#include "strata/models/dropout.h"
#include "strata/models/gpt.h"

using namespace strata;

namespace {
int64_t count(const std::string& flavour, DataShape shape = {}) {
  ModelConfig mc;
  mc.flavour = flavour;
  return build_model(resolve_model_spec(mc, shape))->num_parameters();
}
}  // namespace

TEST(Models, PublishedParameterCounts) {
  EXPECT_EQ(count("gpt2-124m"), 124439808);  // GPT-2 small, tied embedding
  EXPECT_EQ(count("resnet-50"), 25557032);   // torchvision resnet50
  EXPECT_EQ(count("resnet-18"), 11689512);   // torchvision resnet18
  const int64_t bert = count("bert-base");
  // ~110M (Devlin et al.). Exactly: Hugging Face BertForPreTraining's 110,106,428 less
  // the next-sentence classifier (768 x 2 + 2 = 1,538), which masked-LM training omits.
  EXPECT_EQ(bert, 110106428 - 1538);
}

TEST(Models, DebugGptIsSmallAndRuns) {
  ModelConfig mc;
  ModelSpec spec = resolve_model_spec(mc, {});
  auto m = build_model(spec);
  EXPECT_LT(m->num_parameters(), 1500000);
  EXPECT_EQ(m->num_blocks(), 4);
  Batch b{at::randint(spec.vocab_size, {2, 16}), at::randint(spec.vocab_size, {2, 16}), {}};
  at::Tensor loss = m->forward_loss(b);
  // An untrained model predicts about uniformly: loss near ln(V).
  EXPECT_NEAR(loss.item<double>(), std::log(static_cast<double>(spec.vocab_size)), 0.5);
  loss.backward();
  for (auto& p : m->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(Models, CausalGptIgnoresTheFuture) {
  ModelConfig mc;
  ModelSpec spec = resolve_model_spec(mc, {});
  auto m = std::dynamic_pointer_cast<Gpt>(build_model(spec));
  ASSERT_TRUE(m);
  m->eval();
  at::Tensor x = at::randint(spec.vocab_size, {1, 12});
  at::Tensor y = x.clone();
  y.index_put_({0, 11}, (x.index({0, 11}) + 1) % spec.vocab_size);
  Batch a{x, x, {}}, b{y, y, {}};
  at::NoGradGuard ng;
  auto run = [&](const Batch& bb) {
    at::Tensor h = m->embed(bb);
    for (int64_t i = 0; i < m->num_blocks(); ++i) h = m->block(i).forward(h);
    return m->logits(h);
  };
  at::Tensor ra = run(a), rb = run(b);
  EXPECT_TRUE(at::allclose(ra.narrow(1, 0, 11), rb.narrow(1, 0, 11), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(ra.narrow(1, 11, 1), rb.narrow(1, 11, 1)));
}

TEST(Models, ImageModelsOnFashionShapes) {
  ModelConfig mc;
  mc.flavour = "resnet-18";
  DataShape fashion{0, 28, 1, 10};
  auto m = build_model(resolve_model_spec(mc, fashion));
  Batch b{at::randn({2, 1, 28, 28}), at::randint(10, {2}), {}};
  EXPECT_NEAR(m->forward_loss(b).item<double>(), std::log(10.0), 1.5);
  mc.flavour = "mlp";
  auto mlp = build_model(resolve_model_spec(mc, fashion));
  EXPECT_TRUE(std::isfinite(mlp->forward_loss(b).item<double>()));
  EXPECT_GT(m->flops_per_sample(), 0);
}

TEST(Models, UnknownFlavourSuggestsTheName) {
  ModelConfig mc;
  mc.flavour = "gpt2-124";
  try {
    resolve_model_spec(mc, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'gpt2-124m'"), std::string::npos)
        << e.what();
  }
}

TEST(Dropout, CounterBasedMaskHasRateScaleAndReplay) {
  // Note [counter-based dropout]: drop rate p, kept values scaled by 1/(1-p), the
  // same mask for the same seed (and so for the same generator state), in backward too.
  at::Tensor x = at::ones({1 << 20});
  at::Tensor y = dropout_with_seed(x, 0.1, 42);
  const double dropped = (y == 0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, 0.1, 0.002);  // 1M draws: sd 0.0003
  EXPECT_TRUE(at::allclose(y.masked_select(y != 0), at::full({1}, 1 / 0.9)));
  EXPECT_TRUE(at::equal(y, dropout_with_seed(x, 0.1, 42)));
  EXPECT_FALSE(at::equal(y, dropout_with_seed(x, 0.1, 43)));
  // Neighbouring elements are independent: P(both dropped) ~ p^2.
  at::Tensor d = (y == 0).to(at::kDouble);
  EXPECT_NEAR((d.narrow(0, 0, (1 << 20) - 1) * d.narrow(0, 1, (1 << 20) - 1)).mean().item<double>(),
              0.01, 0.001);
  at::manual_seed(5);
  at::Tensor w = at::randn({64, 64}).requires_grad_(true);
  at::Tensor a = counter_dropout(w, 0.3, true);
  a.backward(at::ones_like(a));
  EXPECT_TRUE(at::equal(w.grad(), (a != 0).to(at::kFloat) / 0.7));
  at::manual_seed(5);
  at::randn({64, 64});
  EXPECT_TRUE(at::equal(counter_dropout(w, 0.3, true), a));  // same generator state, same mask
  EXPECT_TRUE(at::equal(counter_dropout(w, 0.3, false), w));
  at::Tensor h = dropout_with_seed(at::ones({1000}, at::kBFloat16), 0.5, 1);
  EXPECT_EQ(h.scalar_type(), at::kBFloat16);
  EXPECT_NEAR((h == 0).to(at::kDouble).mean().item<double>(), 0.5, 0.06);
}
