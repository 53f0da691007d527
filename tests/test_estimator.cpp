// The memory estimator's pure parts (plan/estimator): parameter counts against the
// models Strata builds, model-state bytes, and the seed's reference figures.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "strata/models/build.h"
#include "strata/models/model.h"
#include "strata/plan/estimator.h"

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
  // Padded vocabularies (Note [vocab padding]): 50304 and 30592 rows.
  EXPECT_EQ(count_parameters(spec_of("gpt2-124m")).total, 124439808 + 47 * 768);
  EXPECT_EQ(count_parameters(spec_of("bert-base")).total, 110104890 + 70 * 769);
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

namespace {
EstimateInput gpt_input(const std::string& flavour = "debug") {
  EstimateInput in;
  in.spec = spec_of(flavour);
  in.micro_batch = 8;
  return in;
}
double block_saved(const EstimateInput& in) {
  return estimate_memory(in).activation.blocks.front().saved;
}
}  // namespace

TEST(Estimator, TransformerLayerAgainstKorthikanti) {
  // At 2-byte activations without dropout a Strata layer keeps 32 sbh (no masks,
  // Note [transformer activations]) plus fp32 layer-norm statistics and the fused
  // kernel's log-sum-exp: below Korthikanti's 34 sbh + 5as^2b, and without the s^2 term.
  ModelSpec s = spec_of("gpt2-124m");
  const LayerActivationCheck c = compare_with_korthikanti(s, 4);
  const double sbh = 1024.0 * 4 * 768;
  EXPECT_DOUBLE_EQ(c.strata, 32 * sbh + 16 * 1024.0 * 4 + 2 * 1024.0 * 4 * 12);
  EXPECT_DOUBLE_EQ(c.korthikanti, sbh * (34 + 5.0 * 12 * 1024 / 768));
  EXPECT_NE(c.explanation.find("34 sbh"), std::string::npos);
  // With attention dropout the (s, s) softmax output and dropped probabilities come
  // back: 4as^2b, Korthikanti's 5as^2b less the one-byte mask.
  s.dropout = 0.1;
  const LayerActivationCheck d = compare_with_korthikanti(s, 4);
  EXPECT_DOUBLE_EQ(d.strata - 32 * sbh - 16 * 1024.0 * 4, 4.0 * 12 * 1024 * 1024 * 4);
}

TEST(Estimator, RecomputeModesOrderTheActivations) {
  EstimateInput in = gpt_input();
  in.spec.n_layer = 16;
  in.spec.vocab_size = 256;  // a small head, so the blocks decide the peak
  auto run = [&](RecomputeMode m) {
    in.recompute = m;
    return estimate_memory(in);
  };
  constexpr size_t kActs = static_cast<size_t>(Category::kActivations);
  const MemoryEstimate none = run(RecomputeMode::kNone), full = run(RecomputeMode::kFull),
                       sqrt_ = run(RecomputeMode::kSqrt), sel = run(RecomputeMode::kSelective);
  for (const MemoryEstimate* e : {&full, &sqrt_, &sel})
    EXPECT_LT(e->category_peak[kActs], none.category_peak[kActs]);
  // full keeps one block output per block, sqrt (k = 4) one per segment of 4.
  const auto& b = none.activation.blocks.front();
  EXPECT_DOUBLE_EQ(full.activations_per_micro_batch, none.activation.embed + 16 * b.out);
  EXPECT_DOUBLE_EQ(sqrt_.activations_per_micro_batch, none.activation.embed + 4 * b.out);
  EXPECT_DOUBLE_EQ(none.activations_per_micro_batch, none.activation.embed + 16 * b.saved);
  // Under recompute the peak moves into backward, where a segment is rebuilt.
  EXPECT_NE(full.peak.phase.find("backward"), std::string::npos) << full.peak.phase;
  EXPECT_NE(sqrt_.peak.phase.find("backward"), std::string::npos) << sqrt_.peak.phase;
}

TEST(Estimator, ZeroStagesShrinkStatesAndAddBuffers) {
  EstimateInput in = gpt_input();
  in.dp = 4;
  double prev = 1e300;
  for (int64_t stage = 0; stage <= 3; ++stage) {
    in.zero = stage;
    const MemoryEstimate e = estimate_memory(in);
    const double states = e.states.total();
    EXPECT_LT(states, prev) << "stage " << stage;
    prev = states;
    const double comm = e.category_peak[static_cast<size_t>(Category::kCommBuffers)];
    if (stage == 0)
      EXPECT_EQ(comm, 0);
    else
      EXPECT_GT(comm, 0) << "stage " << stage;  // gathers (1-3) and reductions (2-3)
  }
  // Offload on a CPU run: the optimizer's host copies are tracked memory too.
  in.offload = true;
  const MemoryEstimate off = estimate_memory(in);
  EXPECT_GT(off.host_bytes, 0);
  EXPECT_EQ(off.states.optimizer, 0);
  EXPECT_DOUBLE_EQ(off.timeline.front().bytes[static_cast<size_t>(Category::kOptimizer)],
                   off.host_bytes);
}

TEST(Estimator, TensorAndPipelineFormulas) {
  EstimateInput in = gpt_input("gpt2-124m");
  in.micro_batch = 1;
  const double one = block_saved(in);
  const double N = 1024, C = 768;
  in.tp = 4;
  // Megatron: 4 NC replicated, 12 NC split (at 4 bytes), statistics, the core / tp.
  EXPECT_DOUBLE_EQ(block_saved(in), (4 + 12.0 / 4) * N * C * 4 + 16 * N + N * 12 * 4 / 4);
  in.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(block_saved(in), 16.0 / 4 * N * C * 4 + 16 * N + N * 12 * 4 / 4);
  EXPECT_LT(block_saved(in), one);
  // Pipeline: stage s keeps p - s micro-batches under 1F1B, all of them under GPipe;
  // the last stage one, but it holds the head. The highest stage is the estimate.
  in = gpt_input("gpt2-124m");
  in.micro_batch = 1;
  in.pp = 4;
  in.micro_batches = 8;
  in.spec.vocab_size = 256;  // a small head: stage 0 is the larger
  EXPECT_EQ(estimate_memory(in).micro_batches_in_flight, 4);
  EXPECT_EQ(estimate_memory(in).peak.phase.rfind("stage 0: ", 0), 0u);
  in.stage = 1;
  EXPECT_EQ(estimate_memory(in).micro_batches_in_flight, 3);
  in.stage = -1;
  in.schedule = "gpipe";
  EXPECT_EQ(estimate_memory(in).micro_batches_in_flight, 8);
  in.schedule = "1f1b";
  in.spec.vocab_size = 50257;  // GPT-2's head: the last stage is the larger
  EXPECT_EQ(estimate_memory(in).peak.phase, "stage 3: head.backward (peak)");
  EXPECT_EQ(estimate_memory(in).micro_batches_in_flight, 1);
  EXPECT_EQ(estimate_memory(in).stage, 3);
  // A stage holds a quarter of the blocks; the stages' parameters add up to the
  // model's plus the tied embedding's copy on the last stage.
  const MemoryEstimate e = estimate_memory(in);
  EXPECT_EQ(e.activation.blocks.size(), 3u);
  const ParameterCount c = count_parameters(in.spec);
  double sum = 0;
  for (int64_t s = 0; s < 4; ++s) {
    in.stage = s;
    sum += estimate_memory(in).states.parameters;
  }
  EXPECT_DOUBLE_EQ(sum, 4.0 * static_cast<double>(c.total + c.tied_copy));
  // The partition decides a stage's blocks: 6 on stage 0 of 6,2,2,2.
  in.stage_blocks = {6, 2, 2, 2};
  in.stage = 0;
  EXPECT_EQ(estimate_memory(in).activation.blocks.size(), 6u);
  EXPECT_DOUBLE_EQ(estimate_memory(in).states.parameters,
                   4.0 * static_cast<double>(c.first_stage + 6 * c.per_block));
}

TEST(Estimator, TimelineHasThePhasesAndThePeak) {
  EstimateInput in = gpt_input();
  in.micro_batches = 3;
  const MemoryEstimate e = estimate_memory(in);
  auto has = [&](const std::string& phase) {
    for (const auto& p : e.timeline)
      if (p.phase == phase) return true;
    return false;
  };
  for (const char* p :
       {"step.begin", "micro[0].forward.begin", "block[3].forward.end", "micro[0].loss",
        "block[0].backward (peak)", "micro[1].backward.end", "optimizer.step (peak)", "step.end"})
    EXPECT_TRUE(has(p)) << p;
  // The debug GPT's vocabulary (8192) against d_model 96: the head's backward is
  // the peak (three N x V fp32 tensors at once).
  EXPECT_EQ(e.peak.phase, "head.backward (peak)");
  double highest = 0;
  for (const auto& p : e.timeline) highest = std::max(highest, p.total());
  EXPECT_DOUBLE_EQ(e.peak.total(), highest);
}
