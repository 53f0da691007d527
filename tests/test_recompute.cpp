// Activation recompute: segment plans (pure) and gradients equal to no recompute.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "strata/core/errors.h"
#include "strata/memory/precision.h"
#include "strata/memory/recompute.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/models/build.h"
#include "strata/parallel/recompute.h"
#include "test_util.h"

using namespace strata;

namespace {

std::string plan(RecomputeMode m, int64_t blocks, int64_t k) {
  std::string s;
  for (const auto& seg : recompute_segments(m, blocks, k))
    s += (seg.recompute ? "R[" : "[") + std::to_string(seg.begin) + "," + std::to_string(seg.end) +
         ")";
  return s;
}

struct Grads {
  std::vector<std::string> names;
  std::vector<at::Tensor> grads, buffers;
  double loss = 0;
  int64_t activation_peak = 0;
};

// One forward and backward of a freshly built model (same seed every call) on a
// fixed batch, with dropout drawing from a fixed RNG state.
Grads run(ModelConfig mc, DataShape shape, RecomputeMode mode, int64_t k,
          at::ScalarType dtype = at::kFloat, uint64_t dropout_seed = 11) {
  at::manual_seed(7);
  auto m = build_model(resolve_model_spec(mc, shape));
  if (dtype != at::kFloat) cast_model(*m, dtype);
  apply_recompute(*m, mode, k);
  m->train();
  Batch b;
  if (shape.image_size > 0) {
    b.input = at::randn({4, shape.in_channels, shape.image_size, shape.image_size});
    b.target = at::randint(shape.num_classes, {4});
  } else {
    b.input = at::randint(512, {2, 32});
    b.target = at::randint(512, {2, 32});
  }
  {
    // As the trainer does: gradients exist before backward, so the activations
    // peak is activations only.
    MemoryScope scope(Category::kGradients);
    for (auto& p : m->parameters()) p.mutable_grad() = at::zeros_like(p);
  }
  at::manual_seed(dropout_seed);
  Grads g;
  reset_memory_peaks();
  {
    MemoryScope scope(Category::kActivations);
    AutocastScope autocast(c10::DeviceType::CPU, dtype);
    at::Tensor loss = m->forward_loss(b);
    g.loss = loss.item<double>();
    loss.backward();
  }
  g.activation_peak = memory_stats().peak[static_cast<size_t>(Category::kActivations)];
  for (auto& p : m->named_parameters()) {
    g.names.push_back(p.key());
    g.grads.push_back(p.value().grad().defined() ? p.value().grad().to(at::kDouble) : at::Tensor());
  }
  for (auto& buf : m->buffers()) g.buffers.push_back(buf.clone());
  return g;
}

ModelConfig small_gpt() {
  ModelConfig mc;  // debug GPT, smaller vocabulary, dropout on
  mc.vocab_size = 512;
  mc.seq_len = 32;
  mc.dropout = 0.1;
  return mc;
}

// Largest per-tensor max|a - b| / max|b|.
double worst_relative(const Grads& a, const Grads& ref) {
  double worst = 0;
  EXPECT_EQ(a.grads.size(), ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    if (!ref.grads[i].defined()) {
      EXPECT_FALSE(a.grads[i].defined()) << ref.names[i];
      continue;
    }
    EXPECT_TRUE(a.grads[i].defined()) << ref.names[i];
    if (!a.grads[i].defined()) return INFINITY;
    const double scale = std::max(1e-30, ref.grads[i].abs().max().item<double>());
    worst = std::max(worst, (a.grads[i] - ref.grads[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

}  // namespace

TEST(RecomputeSegments, EveryModeAsDocumented) {
  EXPECT_EQ(plan(RecomputeMode::kNone, 4, 2), "[0,4)");
  EXPECT_EQ(plan(RecomputeMode::kSelective, 4, 2), "[0,4)");
  EXPECT_EQ(plan(RecomputeMode::kFull, 3, 2), "R[0,1)R[1,2)R[2,3)");
  EXPECT_EQ(plan(RecomputeMode::kEveryK, 5, 2), "R[0,2)R[2,4)R[4,5)");
  EXPECT_EQ(plan(RecomputeMode::kEveryK, 4, 4), "R[0,4)");
  EXPECT_EQ(plan(RecomputeMode::kSqrt, 16, 0), "R[0,4)R[4,8)R[8,12)R[12,16)");
  EXPECT_EQ(plan(RecomputeMode::kSqrt, 10, 0), "R[0,4)R[4,8)R[8,10)");  // ceil(sqrt 10) = 4
  const auto sqrt36 = recompute_segments(RecomputeMode::kSqrt, 36, 0);
  ASSERT_EQ(sqrt36.size(), 6u);
  for (const auto& s : sqrt36) EXPECT_EQ(s.end - s.begin, 6);
  EXPECT_EQ(plan(RecomputeMode::kFull, 0, 1), "");
}

TEST(RecomputeSegments, KOutOfRangeIsAClearError) {
  for (int64_t k : {0, -1, 5}) {
    try {
      recompute_segments(RecomputeMode::kEveryK, 4, k);
      ADD_FAILURE() << "k=" << k << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("memory.recompute_k=" + std::to_string(k) +
                                           " must be between 1 and the model's 4 blocks"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(parse_recompute("sometimes"), Error);
}

TEST(Recompute, EveryModeGivesTheSameGradientsWithDropout) {
  // fp32, dropout 0.1 in attention, after attention and after the MLP: the
  // recomputation replays the forward's RNG state, so the masks and the gradients
  // are the same. Bound: 1e-6 of each tensor's largest gradient.
  install_tracking_allocator();
  const Grads ref = run(small_gpt(), {}, RecomputeMode::kNone, 1);
  for (auto [mode, k] :
       std::vector<std::pair<RecomputeMode, int64_t>>{{RecomputeMode::kFull, 1},
                                                      {RecomputeMode::kEveryK, 2},
                                                      {RecomputeMode::kEveryK, 3},
                                                      {RecomputeMode::kSqrt, 0},
                                                      {RecomputeMode::kSelective, 0}}) {
    const Grads g = run(small_gpt(), {}, mode, k);
    EXPECT_EQ(g.loss, ref.loss) << recompute_name(mode);
    EXPECT_LE(worst_relative(g, ref), 1e-6) << recompute_name(mode) << " k=" << k;
    // And it saves memory: less activation peak than keeping everything.
    EXPECT_LT(g.activation_peak, ref.activation_peak) << recompute_name(mode) << " k=" << k;
  }
}

TEST(Recompute, OtherDropoutMasksGiveOtherGradients) {
  // The bound above can fail: had the recomputation drawn fresh masks (no RNG
  // replay), its gradients would differ like these, from masks of another seed.
  const Grads ref = run(small_gpt(), {}, RecomputeMode::kNone, 1);
  const Grads other = run(small_gpt(), {}, RecomputeMode::kNone, 1, at::kFloat, 12);
  EXPECT_GT(worst_relative(other, ref), 1e-2);
}

TEST(Recompute, HalfPrecisionUnderAutocastMatches) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const Grads ref = run(small_gpt(), {}, RecomputeMode::kNone, 1, dt);
    for (auto mode : {RecomputeMode::kFull, RecomputeMode::kSelective}) {
      const Grads g = run(small_gpt(), {}, mode, 1, dt);
      EXPECT_LE(worst_relative(g, ref), 1e-6) << recompute_name(mode) << " " << dt;
    }
  }
}

TEST(Recompute, BatchNormStatisticsUpdateOnce) {
  // ResNet-18 on 32-pixel images: gradients and running statistics as without
  // recompute (the recomputation puts the buffers back).
  ModelConfig mc;
  mc.flavour = "resnet-18";
  DataShape shape{0, 32, 3, 10};
  const Grads ref = run(mc, shape, RecomputeMode::kNone, 1);
  const Grads g = run(mc, shape, RecomputeMode::kSqrt, 0);
  EXPECT_LE(worst_relative(g, ref), 1e-6);
  ASSERT_EQ(g.buffers.size(), ref.buffers.size());
  for (size_t i = 0; i < ref.buffers.size(); ++i)
    EXPECT_TRUE(at::equal(g.buffers[i], ref.buffers[i])) << "buffer " << i;
}

TEST(Recompute, SelectiveNeedsAttention) {
  ModelConfig mc;
  mc.flavour = "mlp";
  auto m = build_model(resolve_model_spec(mc, DataShape{0, 28, 1, 10}));
  try {
    apply_recompute(*m, RecomputeMode::kSelective, 1);
    ADD_FAILURE() << "selective accepted for an MLP";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this model's blocks have none; use full, every-k"),
              std::string::npos);
  }
}

TEST(RecomputeTraining, DataParallelRunsMatchNoRecompute) {
  // strata train at dp=2 with dropout 0.1, 6 steps: each mode against no recompute,
  // fp32 and bf16 (master weights). Losses within 1e-6 relative at every step,
  // parameters within 1e-6 (per-tensor L2, test_util's max_param_diff).
  using namespace strata::test;
  auto train = [](const std::string& dir, const std::string& args) {
    return strata_bin() + " train --logging.run_dir=" + dir +
           " --logging.progress=off --training.eval_interval=0 --nproc 2 "
           "--training.steps=6 --training.batch_size=8 --model.dropout=0.1 " +
           args;
  };
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::string ref = temp_dir("rc-dp2-" + precision + "-none");
    auto r0 = run(train(ref, "--memory.precision=" + precision), 240);
    ASSERT_EQ(r0.status, 0) << r0.output;
    const auto l0 = read_losses(ref + "/metrics.jsonl");
    ASSERT_EQ(l0.size(), 6u);
    for (const std::string mode : {"full", "sqrt", "selective"}) {
      if (precision == "bf16" && mode == "sqrt") continue;
      const std::string dir = temp_dir("rc-dp2-" + precision + "-" + mode);
      auto r =
          run(train(dir, "--memory.precision=" + precision + " --memory.recompute=" + mode), 240);
      ASSERT_EQ(r.status, 0) << r.output;
      const auto l = read_losses(dir + "/metrics.jsonl");
      ASSERT_EQ(l.size(), 6u);
      for (size_t i = 0; i < l.size(); ++i)
        EXPECT_NEAR(l[i], l0[i], 1e-6 * std::abs(l0[i]))
            << precision << " " << mode << " step " << i + 1;
      EXPECT_LE(max_param_diff(dir, ref, 6), 1e-6) << precision << " " << mode;
    }
  }
}
