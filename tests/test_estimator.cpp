// The memory estimator's pure parts (memory/estimator): parameter counts against the
// models Strata builds, model-state bytes, and the seed's reference figures.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "strata/memory/estimator.h"
#include "strata/models/build.h"
#include "strata/models/model.h"

using namespace strata;

namespace {

ModelSpec spec_of(const std::string& flavour, const DataShape& shape = {}, bool tied = true) {
  ModelConfig mc;
  mc.flavour = flavour;
  mc.tied_embedding = tied;
  return resolve_model_spec(mc, shape);
}

int64_t built(const ModelSpec& s, int64_t* trainable = nullptr) {
  auto m = build_model(s);
  int64_t n = 0, t = 0;
  for (auto& p : m->parameters()) {
    n += p.numel();
    t += p.requires_grad() ? p.numel() : 0;
  }
  if (trainable) *trainable = t;
  return n;
}

constexpr double kGB = 1e9;

}  // namespace

TEST(Estimator, ParameterCountsEqualTheBuiltModels) {
  // Small models are built and counted; the large ones have their known counts.
  struct Case {
    std::string name;
    ModelSpec spec;
  };
  const std::vector<Case> cases = {
      {"debug", spec_of("debug")},
      {"debug untied", spec_of("debug", {}, /*tied=*/false)},
      {"bert-debug", spec_of("bert-debug")},
      {"resnet-18 cifar", spec_of("resnet-18", {0, 32, 3, 10})},
      {"resnet-50 cifar", spec_of("resnet-50", {0, 32, 3, 10})},
      {"mlp", spec_of("mlp", {0, 28, 1, 10})},
  };
  for (const Case& c : cases) {
    int64_t trainable = 0;
    const int64_t n = built(c.spec, &trainable);
    const ParameterCount pc = count_parameters(c.spec);
    EXPECT_EQ(pc.total, n) << c.name;
    EXPECT_EQ(pc.trainable, trainable) << c.name;
    if (c.spec.family != Family::kResNet)  // ResNet's blocks differ in size
      EXPECT_EQ(pc.outside_blocks + c.spec.n_layer * pc.per_block, pc.total) << c.name;
  }
  EXPECT_EQ(count_parameters(spec_of("gpt2-124m")).total, 124439808);
  EXPECT_EQ(count_parameters(spec_of("bert-base")).total, 110104890);
  EXPECT_EQ(count_parameters(spec_of("resnet-18")).total, 11689512);
  EXPECT_EQ(count_parameters(spec_of("resnet-50")).total, 25557032);
}

TEST(Estimator, SeedFiguresOfModelSize) {
  // ResNet-50's fp32 parameters: ~98 MB (MiB, as the seed counts them).
  const ParameterCount r50 = count_parameters(spec_of("resnet-50"));
  EXPECT_NEAR(4.0 * static_cast<double>(r50.total) / (1 << 20), 97.5, 0.5);
  // BERT-base: ~110M parameters.
  EXPECT_NEAR(static_cast<double>(count_parameters(spec_of("bert-base")).total) / 1e6, 110, 0.5);
  // GPT-3 175B (96 layers, d 12288, 96 heads, context 2048, GPT-2's vocabulary):
  // ~350 GB for its fp16 parameters alone.
  ModelConfig mc;
  mc.flavour = "gpt2-124m";
  mc.n_layer = 96;
  mc.d_model = 12288;
  mc.n_head = 96;
  mc.seq_len = 2048;
  const ParameterCount gpt3 = count_parameters(resolve_model_spec(mc, {}));
  EXPECT_NEAR(static_cast<double>(gpt3.total) / 1e9, 175, 1);
  const ModelStateBytes half =
      model_state_bytes(gpt3.total, gpt3.trainable, {2, true, 0, 1, false});
  EXPECT_NEAR(half.parameters / kGB, 350, 3);
}

TEST(Estimator, ZeroPaperModelStatesFor7_5BOn64Devices) {
  // Rajbhandari et al. 2020, figure 1: Psi = 7.5B, N = 64, mixed-precision Adam
  // (K = 12): 120, 31.4, 16.6 and 1.9 GB of model states per device for stages 0-3.
  const int64_t psi = 7'500'000'000;
  const double want[] = {120, 31.4, 16.6, 1.9};
  for (int64_t stage = 0; stage <= 3; ++stage) {
    const ModelStateBytes b = model_state_bytes(psi, psi, {2, true, stage, 64, false});
    EXPECT_NEAR(b.total() / kGB, want[stage], 0.05) << "stage " << stage;
  }
}

TEST(Estimator, ModelStatesFollowPrecisionStageAndOffload) {
  const int64_t psi = 1000, n = 4;
  // fp32: 4 + 4 + 8 bytes per parameter, split as the stages say.
  auto fp32 = [&](int64_t stage) { return model_state_bytes(psi, psi, {4, false, stage, n}); };
  EXPECT_DOUBLE_EQ(fp32(0).total(), 16.0 * psi);
  EXPECT_DOUBLE_EQ(fp32(1).total(), 8.0 * psi + 8.0 * psi / n);
  EXPECT_DOUBLE_EQ(fp32(2).total(), 4.0 * psi + 12.0 * psi / n);
  EXPECT_DOUBLE_EQ(fp32(3).total(), 16.0 * psi / n);
  // Autocast style (fp32 parameters, master_weights off) is fp32's.
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, psi, {4, true, 2, n}).total(), fp32(2).total());
  // Offload moves the optimizer to the host (fp32 copy, gradient buffer, moments);
  // at stage 3 the parameters go too.
  const ModelStateBytes off = model_state_bytes(psi, psi, {2, true, 3, n, true});
  EXPECT_DOUBLE_EQ(off.optimizer, 0);
  EXPECT_DOUBLE_EQ(off.parameters, 0);
  EXPECT_DOUBLE_EQ(off.gradients, 2.0 * psi / n);
  EXPECT_DOUBLE_EQ(off.host_optimizer, 16.0 * psi / n);
  // Frozen parameters take parameter bytes only, unsharded.
  const ModelStateBytes fr = model_state_bytes(psi + 100, psi, {4, false, 3, n});
  EXPECT_DOUBLE_EQ(fr.parameters, 4.0 * psi / n + 400);
  EXPECT_DOUBLE_EQ(fr.gradients, 4.0 * psi / n);
}

TEST(Estimator, KorthikantiLayerFormula) {
  // sbh(34 + 5as/h): GPT-3's layer (s 2048, h 12288, a 96) at micro-batch 1.
  const double s = 2048, h = 12288, a = 96;
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(2048, 1, 12288, 96),
                   s * h * (34 + 5 * a * s / h));
  // The attention term is the whole story at long sequences: 5as/h vs 34.
  EXPECT_GT(korthikanti_layer_activation_bytes(8192, 1, 768, 12),
            5 * korthikanti_layer_activation_bytes(1024, 1, 768, 12));
}
