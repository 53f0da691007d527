// Mixed precision (memory/precision, memory/loss_scaler, AdamW master weights):
// units in-process, then end-to-end runs of `strata train`.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>

#include <cmath>
#include <cstdlib>
#include <numeric>

#include "strata/core/errors.h"
#include "strata/memory/loss_scaler.h"
#include "strata/memory/precision.h"
#include "strata/models/build.h"
#include "strata/optim/adamw.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

namespace {

double mean_last(const std::vector<double>& v, size_t n) {
  return std::accumulate(v.end() - static_cast<int64_t>(n), v.end(), 0.0) / static_cast<double>(n);
}

}  // namespace

TEST(LossScaler, GradScalerRule) {
  LossScaler s({true, 65536, 2, 0.5, 3});
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_TRUE(s.update(false));  // third overflow-free step in a row: grow
  EXPECT_EQ(s.scale(), 131072);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));  // overflow: skip, back off, restart the count
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_EQ(s.state().skipped, 1);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 131072);
  LossScaler t({true, 1, 2, 0.5, 3});
  t.set_state(s.state());
  EXPECT_EQ(t.scale(), 131072);
  EXPECT_EQ(t.state().skipped, 1);
  LossScaler off({false, 65536, 2, 0.5, 3});  // bf16 / fp32: no scaling
  EXPECT_EQ(off.scale(), 1);
  EXPECT_TRUE(off.update(false));
}

TEST(Precision, LayerNormOfHalfInputComputesInFp32) {
  // Note [precision of sensitive ops]: layer norm of a half input equals the fp32
  // layer norm of the same values, rounded once to the half type.
  at::manual_seed(3);
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    at::Tensor x = (at::randn({64, 768}) * 30 + 100).to(dt);  // a large mean: cancellation
    at::Tensor w = at::randn({768}).to(dt), b = at::randn({768}).to(dt);
    at::Tensor half = at::layer_norm(x, {768}, w, b);
    at::Tensor ref = at::layer_norm(x.to(at::kFloat), {768}, w.to(at::kFloat), b.to(at::kFloat));
    // At most one rounding step of the half type apart (the fp32 results differ in
    // the last fp32 bits, which can tip a rounding).
    const double ulp = dt == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    at::Tensor err = (half.to(at::kFloat) - ref).abs() / ref.abs().clamp_min(1e-3);
    EXPECT_LE(err.max().item<double>(), ulp) << dt;
    // Whereas computing in the half type itself is visibly worse.
    at::Tensor naive = (x - x.mean(-1, true)) / (x.var(-1, false, true) + 1e-5).sqrt();
    naive = naive * w + b;
    EXPECT_GT(((naive.to(at::kFloat) - ref).abs() / ref.abs().clamp_min(1e-3)).max().item<double>(),
              ulp)
        << dt;
  }
}

TEST(Precision, CastModelKeepsBatchNormFp32) {
  ModelConfig mc;
  mc.flavour = "resnet-18";
  auto m = build_model(resolve_model_spec(mc, DataShape{0, 32, 3, 10}));
  cast_model(*m, at::kBFloat16);
  int64_t half = 0, bn = 0;
  for (auto& mod : m->modules()) {
    const bool is_bn = mod->as<torch::nn::BatchNorm2d>() != nullptr;
    for (auto& p : mod->named_parameters(false)) {
      EXPECT_EQ(p.value().scalar_type(), is_bn ? at::kFloat : at::kBFloat16) << p.key();
      (is_bn ? bn : half) += 1;
    }
    for (auto& b : mod->named_buffers(false))
      if (b.value().is_floating_point()) EXPECT_EQ(b.value().scalar_type(), at::kFloat);
  }
  EXPECT_GT(half, 20);
  EXPECT_GT(bn, 20);
}

TEST(Precision, DeviceThatCannotRunItIsOneClearError) {
  EXPECT_NO_THROW(check_precision_supported(Precision::kBf16, at::Device(at::kCPU)));
  EXPECT_NO_THROW(check_precision_supported(Precision::kFp16, at::Device(at::kCPU)));
  if (at::hasCUDA()) GTEST_SKIP() << "a CUDA device is present";
  try {
    check_precision_supported(Precision::kBf16, at::Device("cuda:0"));
    ADD_FAILURE() << "bf16 on a missing CUDA device accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("memory.precision=bf16 cannot run on cuda:0 (", 0), 0u) << msg;
    EXPECT_NE(msg.find("); use memory.precision=fp16 or fp32"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(AdamWMaster, StepsTheFp32CopyAndRoundsIntoTheParameter) {
  // A bf16 parameter with a master copy follows fp32 AdamW exactly; the update of a
  // small learning rate, lost in bf16 arithmetic, accumulates in the master.
  at::manual_seed(5);
  at::Tensor w32 = at::randn({16, 16}) + 4;
  at::Tensor wh = w32.to(at::kBFloat16);
  at::Tensor ref = wh.to(at::kFloat).clone();  // what the master starts from
  AdamW half({{"w", wh}}, {}, /*master_weights=*/true);
  AdamW full({{"w", ref}}, {});
  ASSERT_TRUE(half.state()[0].master.defined());
  EXPECT_EQ(half.state()[0].master.scalar_type(), at::kFloat);
  for (int i = 0; i < 5; ++i) {
    at::Tensor g = at::randn({16, 16});
    wh.mutable_grad() = g.to(at::kBFloat16);
    ref.mutable_grad() = g.to(at::kBFloat16).to(at::kFloat);
    half.step(1e-4, 0.5);  // unscale by 2 on the way
    full.step(1e-4, 0.5);
  }
  EXPECT_TRUE(at::equal(half.state()[0].master, ref));
  EXPECT_TRUE(at::equal(wh, ref.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(wh.grad().to(at::kFloat), ref.grad() * 2))
      << "a half gradient is widened, not scaled in place";
  // 5 steps of ~1e-4 on values near 4 (bf16 spacing 1/32): the bf16 parameter
  // alone would not have moved; the master has.
  EXPECT_GT(
      (half.state()[0].master - w32.to(at::kBFloat16).to(at::kFloat)).abs().max().item<double>(),
      1e-4);
}

TEST(GradNorm, Fp16GradientsBeyondFp16Range) {
  // A loss-scaled fp16 gradient: every element representable, its norm (~131072)
  // is not; the norm is still exact, and an inf anywhere makes it non-finite.
  at::Tensor p = at::zeros({1 << 22}, at::kHalf);
  p.mutable_grad() = at::full({1 << 22}, 64.0, at::kHalf);
  const double n2 = grad_norm_squared({{"p", p}});
  EXPECT_DOUBLE_EQ(n2, 64.0 * 64.0 * static_cast<double>(1 << 22));
  p.mutable_grad().view({-1}).narrow(0, (1 << 22) - 1, 1).fill_(INFINITY);
  EXPECT_FALSE(std::isfinite(grad_norm_squared({{"p", p}})));
  p.mutable_grad().view({-1}).narrow(0, (1 << 22) - 1, 1).fill_(NAN);
  EXPECT_FALSE(std::isfinite(grad_norm_squared({{"p", p}})));
}

TEST(PrecisionTraining, InfOnOneRankSkipsTheStepEverywhere) {
  // fp16 at dp=2; rank 1 alone gets an inf in one gradient after the all-reduce at
  // step 4. Rank 0 (which writes the metrics) must skip too, the scale must halve,
  // then grow again after loss_scale_interval=3 clean steps; losses stay finite
  // (a rank that applied the inf would turn its replica, and the averaged loss, NaN).
  const std::string dir = temp_dir("fp16-inject");
  auto r = run("env STRATA_INJECT_INF=1:4 " +
                   train_command(dir,
                                 "--nproc 2 --training.steps=8 --training.batch_size=8 "
                                 "--memory.precision=fp16 --memory.loss_scale_interval=3 "
                                 "--checkpoint.save_final=false"),
               240);
  ASSERT_EQ(r.status, 0) << r.output;
  auto recs = read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 8u);
  const std::vector<double> scales = {65536, 65536, 131072, 65536, 65536, 65536, 131072, 131072};
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i]["loss_scale"].get<double>(), scales[i]) << "step " << i + 1;
    EXPECT_EQ(recs[i]["skipped"].get<bool>(), i == 3) << "step " << i + 1;
    EXPECT_TRUE(std::isfinite(recs[i]["loss"].get<double>())) << "step " << i + 1;
  }
  EXPECT_EQ(recs.back()["skipped_steps"].get<int64_t>(), 1);
  EXPECT_EQ(count_lines_with(r.output,
                             "step 4: inf/NaN in the gradients, step skipped on every "
                             "rank; loss scale 131072 -> 65536"),
            1)
      << r.output;
}

TEST(PrecisionTraining, HalfPrecisionLearnsLikeFp32) {
  // 120 steps of the debug GPT on KJV (context 32, global batch 4): bf16 and fp16
  // (master weights; fp16 with loss scaling) end within 3% of fp32, comparing the
  // mean loss of the last 20 steps. Memory as Note [mixed precision] says:
  // parameters and gradients halve, the optimizer holds 12 bytes per parameter
  // instead of 8 (fp32 master + moments).
  const std::string common =
      "--training.steps=120 --training.batch_size=4 --model.seq_len=32 --training.threads=1 "
      "--checkpoint.save_final=false ";
  std::map<std::string, std::vector<nlohmann::json>> recs;
  for (const std::string p : {"fp32", "bf16", "fp16"}) {
    const std::string dir = temp_dir("prec-" + p);
    auto r = run(train_command(dir, common + "--memory.precision=" + p), 280);
    ASSERT_EQ(r.status, 0) << r.output;
    recs[p] = read_metrics(dir + "/metrics.jsonl");
    ASSERT_EQ(recs[p].size(), 120u) << p;
  }
  auto losses = [&](const std::string& p) {
    std::vector<double> l;
    for (auto& j : recs[p]) l.push_back(j["loss"].get<double>());
    return l;
  };
  const double ref = mean_last(losses("fp32"), 20);
  EXPECT_LT(ref, 6.0);  // it learned
  for (const std::string p : {"bf16", "fp16"}) {
    const double m = mean_last(losses(p), 20);
    std::printf("%s: mean loss of the last 20 steps %.4f, fp32 %.4f (%+.2f%%)\n", p.c_str(), m, ref,
                100 * (m - ref) / ref);
    EXPECT_LT(std::abs(m - ref) / ref, 0.03) << p << " " << m << " vs fp32 " << ref;
    const auto& cur = recs[p].back()["mem_current"];
    const auto& cur32 = recs["fp32"].back()["mem_current"];
    EXPECT_EQ(cur["parameters"].get<int64_t>() * 2, cur32["parameters"].get<int64_t>()) << p;
    EXPECT_EQ(cur["gradients"].get<int64_t>() * 2, cur32["gradients"].get<int64_t>()) << p;
    EXPECT_EQ(cur["optimizer"].get<int64_t>() * 2, cur32["optimizer"].get<int64_t>() * 3) << p;
    EXPECT_LT(recs[p].back()["mem_peak"]["activations"].get<int64_t>(),
              recs["fp32"].back()["mem_peak"]["activations"].get<int64_t>())
        << p;
  }
  // Dynamic loss scaling at PyTorch's initial 65536: at this shape a few steps near
  // the peak learning rate overflow; each skip halves the scale and training goes on
  // (the losses above). At most 5% of the steps may be skipped.
  double prev_scale = 65536;
  for (const auto& rec : recs["fp16"]) {
    const double scale = rec["loss_scale"].get<double>();
    if (rec["skipped"].get<bool>()) EXPECT_EQ(scale, prev_scale / 2) << rec.dump();
    prev_scale = scale;
  }
  EXPECT_LE(recs["fp16"].back()["skipped_steps"].get<int64_t>(), 6);
}

TEST(PrecisionTraining, AutocastStyleKeepsFp32Parameters) {
  // master_weights=false: fp32 parameters, gradients and optimizer as an fp32 run,
  // fp16 compute with loss scaling; it learns.
  const std::string dir = temp_dir("prec-autocast");
  auto r = run(train_command(dir,
                             "--training.steps=30 --memory.precision=fp16 "
                             "--training.batch_size=4 --model.seq_len=64 "
                             "--memory.master_weights=false --checkpoint.save_final=false"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto recs = read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 30u);
  const auto& cur = recs.back()["mem_current"];
  EXPECT_EQ(cur["parameters"].get<int64_t>(), cur["gradients"].get<int64_t>());
  EXPECT_EQ(cur["optimizer"].get<int64_t>(), 2 * cur["parameters"].get<int64_t>());
  EXPECT_LT(recs.back()["loss"].get<double>(), recs.front()["loss"].get<double>() - 1.0);
}

TEST(PrecisionTraining, Fp16ResumeReproducesLossesBitwise) {
  // The checkpoint holds the fp32 master weights and the loss scaler's state.
  const std::string common =
      "--training.steps=10 --model.dropout=0.1 --memory.precision=fp16 "
      "--memory.loss_scale_interval=4 --training.batch_size=4 --model.seq_len=64 ";
  const std::string a = temp_dir("fp16-resume-a"), b = temp_dir("fp16-resume-b");
  auto ra = run(train_command(a, common + "--checkpoint.interval=5"));
  ASSERT_EQ(ra.status, 0) << ra.output;
  auto rb =
      run(train_command(b, common + "--checkpoint.resume=" + a + "/checkpoints/step-00000005"));
  ASSERT_EQ(rb.status, 0) << rb.output;
  auto ma = read_metrics(a + "/metrics.jsonl"), mb = read_metrics(b + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), 10u);
  ASSERT_EQ(mb.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ma[5 + i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << 6 + i;
    EXPECT_EQ(ma[5 + i]["loss_scale"].get<double>(), mb[i]["loss_scale"].get<double>());
  }
}

TEST(PrecisionTraining, BadSettingsAreOneClearLine) {
  const std::string dir = temp_dir("prec-bad");
  expect_one_error_line(train_command(dir, "--memory.precision=fp8"),
                        "error: memory.precision='fp8' is not known");
  expect_one_error_line(train_command(dir, "--memory.recompute=every-k --memory.recompute_k=0"),
                        "error: memory.recompute_k=0 must be >= 1");
  expect_one_error_line(train_command(dir, "--memory.recompute=every-k --memory.recompute_k=5"),
                        "error: memory.recompute_k=5 must be between 1 and the model's 4 blocks");
  expect_one_error_line(train_command(dir,
                                      "--model.flavour=mlp --data.source=synthetic "
                                      "--memory.recompute=selective"),
                        "error: memory.recompute=selective recomputes attention cores");
  expect_one_error_line(train_command(dir, "--memory.loss_scale_backoff=2"),
                        "error: memory.loss_scale_backoff=2 must be in (0, 1)");
}
