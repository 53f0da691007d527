// The hardware profile (Note [hardware profile]): its lookups on hand-made profiles,
// the link fit, JSON in and out with damaged files, the datasheet profiles that ship in
// profiles/, and `strata calibrate` on this machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "strata/cli/machine_bench.h"
#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/models/flavours.h"
#include "strata/plan/estimator.h"
#include "strata/plan/profile.h"
#include "strata/plan/reference_fit.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

TEST(Profile, LookupsInterpolateRatesAndScaleCollectives) {
  HardwareProfile p;
  p.name = "hand";
  // 1 GFLOP/s at 1e3 FLOPs, 10 GFLOP/s at 1e5: halfway in log(flops) is 5.5 GFLOP/s.
  p.gemm["fp32"] = {{1e3, 1e-6}, {1e5, 1e-5}};
  EXPECT_DOUBLE_EQ(p.gemm_seconds("fp32", 1e4), 1e4 / 5.5e9);
  EXPECT_DOUBLE_EQ(p.gemm_seconds("fp32", 10), 1e-6) << "below the smallest: its latency";
  EXPECT_DOUBLE_EQ(p.gemm_seconds("fp32", 1e7), 1e-3) << "above the largest: its rate";
  EXPECT_DOUBLE_EQ(p.peak_flops("fp32"), 1e10);
  EXPECT_THROW(p.gemm_seconds("bf16", 1e4), Error);

  p.collectives["all_reduce"][2] = {1e-5, 1e9};
  p.collectives["all_reduce"][4] = {3e-5, 1e9};
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 2, 1e6), 1e-5 + 1e-3);
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 1, 1e6), 0) << "a group of one";
  // 8 ranks from the fit at 4: latency x 7/3, bandwidth term x (7/8)/(3/4).
  EXPECT_NEAR(p.collective_seconds("all_reduce", 8, 1e6), 3e-5 * 7 / 3 + 1e-3 * (7.0 / 8) / 0.75,
              1e-12);
  // No measurement: the ring over the link (8 per node: NVLink-like inside, slower out).
  p.ranks_per_node = 8;
  p.intra_node = {1e-5, 1e11};
  p.inter_node = {2e-5, 1e10};
  EXPECT_NEAR(p.collective_seconds("all_gather", 8, 1e9), 7 * 1e-5 + 7.0 / 8 * 1e9 / 1e11, 1e-12);
  EXPECT_NEAR(p.collective_seconds("reduce_scatter", 16, 1e9), 15 * 2e-5 + 15.0 / 16 * 0.1, 1e-12);
  EXPECT_GT(p.collective_seconds("reduce_scatter", 16, 1e9),
            p.collective_seconds("reduce_scatter", 8, 1e9))
      << "across nodes costs more";
  // A group smaller than the world takes that world's loaded fit where there is one
  // (Note [collectives in a loaded world]); the whole world, or a world not measured,
  // the group's own.
  p.loaded_collectives["all_reduce"][4][2] = {2e-5, 5e8};
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 2, 1e6, 0, 4), 2e-5 + 2e-3);
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 2, 1e6, 0, 2), 1e-5 + 1e-3);
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 2, 1e6, 0, 8), 1e-5 + 1e-3);
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 4, 1e6, 0, 4), 3e-5 + 1e-3);
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_gather", 2, 1e9, 0, 4),
                   p.collective_seconds("all_gather", 2, 1e9))
      << "an op without a loaded fit";

  // Kernels interpolate as GEMMs do; a missing one is the caller's fallback.
  p.kernels["gelu/fp32"] = {{1e3, 1e-6}, {1e5, 1e-5}};
  EXPECT_DOUBLE_EQ(p.kernel_seconds("gelu/fp32", 1e4, 0), 1e4 / 5.5e9);
  EXPECT_DOUBLE_EQ(p.kernel_seconds("gelu/bf16", 1e4, 7.0), 7.0);
  // Contention: linear between measured sizes from 1 at one rank; beyond the largest
  // it grows with the oversubscription; without measurements, ranks x threads / cores.
  p.cores = 2, p.threads = 1;
  EXPECT_DOUBLE_EQ(p.compute_share(4), 2.0);
  EXPECT_DOUBLE_EQ(p.compute_share(1), 1.0);
  p.contention = {{2, 1.2}, {4, 2.6}};
  EXPECT_DOUBLE_EQ(p.compute_share(1.5), 1.1);
  EXPECT_DOUBLE_EQ(p.compute_share(3), 1.9);
  EXPECT_DOUBLE_EQ(p.compute_share(8), 2.6 * 2);
  // Step scales: the nearest measured size below, 1 below all.
  p.step_scale = {{2, 1.3}, {4, 1.1}};
  EXPECT_DOUBLE_EQ(p.step_scale_for(1), 1.0);
  EXPECT_DOUBLE_EQ(p.step_scale_for(3), 1.3);
  EXPECT_DOUBLE_EQ(p.step_scale_for(16), 1.1);
  // The compute slowdown: contention times step scale at the measured worlds, linear
  // between them (Note [calibrated worlds]: 3 ranks lie halfway between 2 and 4, not at
  // 2's step scale), between whole numbers beyond the largest.
  EXPECT_DOUBLE_EQ(p.compute_slowdown(1), 1.0);
  EXPECT_DOUBLE_EQ(p.compute_slowdown(2), 1.2 * 1.3);
  EXPECT_DOUBLE_EQ(p.compute_slowdown(3), (1.2 * 1.3 + 2.6 * 1.1) / 2);
  EXPECT_DOUBLE_EQ(p.compute_slowdown(3.5), 1.2 * 1.3 + (2.6 * 1.1 - 1.2 * 1.3) * 0.75);
  EXPECT_DOUBLE_EQ(p.compute_slowdown(1.5), (1.0 + 1.2 * 1.3) / 2);
  EXPECT_DOUBLE_EQ(p.compute_slowdown(5), 2.6 * 2.5 / 2 * 1.1);
  EXPECT_DOUBLE_EQ(p.compute_slowdown(4.5), (2.6 * 1.1 + 2.6 * 2.5 / 2 * 1.1) / 2);
  // Every world measured: whole numbers, linear between, as before.
  p.contention[3] = 1.8, p.step_scale[3] = 1.25;
  EXPECT_DOUBLE_EQ(p.compute_slowdown(3), 1.8 * 1.25);
  EXPECT_DOUBLE_EQ(p.compute_slowdown(3.5), (1.8 * 1.25 + 2.6 * 1.1) / 2);
}

TEST(Profile, CalibratedWorldsArePowersOfTwoAndTheWorld) {
  // Note [calibrated worlds].
  EXPECT_EQ(calibrated_worlds(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(calibrated_worlds(2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(calibrated_worlds(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(calibrated_worlds(4), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(calibrated_worlds(6), (std::vector<int64_t>{1, 2, 4, 6}));
  EXPECT_EQ(calibrated_worlds(8), (std::vector<int64_t>{1, 2, 4, 8}));
}

TEST(Profile, SweepStopsAfterTheFirstSlowCall) {
  // Note [slow dtypes in calibration]: the size that first runs past the limit is the
  // last timed, even where a later one would be quicker; none past it: all timed.
  std::vector<int> timed;
  const std::vector<double> seconds{0.01, 0.1, 0.3, 0.05, 2.0};
  auto time_at = [&](int i) {
    timed.push_back(i);
    return seconds[i];
  };
  EXPECT_EQ(sweep_until_slow(std::vector<int>{0, 1, 2, 3, 4}, time_at), 3u);
  EXPECT_EQ(timed, (std::vector<int>{0, 1, 2}));
  timed.clear();
  EXPECT_EQ(sweep_until_slow(std::vector<int>{0, 1, 3}, time_at), 3u);
  timed.clear();
  EXPECT_EQ(sweep_until_slow(std::vector<int>{0, 1, 2}, time_at, 0.05), 2u);
  EXPECT_EQ(timed, (std::vector<int>{0, 1}));
}

TEST(Profile, LinkFitRecoversLatencyAndBandwidth) {
  std::vector<std::pair<double, double>> s;
  for (double b : {4e3, 6.4e4, 1e6, 8e6}) s.push_back({b, 2e-5 + b / 3e9});
  const LinkFit f = fit_link(s);
  EXPECT_NEAR(f.latency_s, 2e-5, 1e-9);
  EXPECT_NEAR(f.bytes_per_s / 3e9, 1.0, 1e-6);
  // Noise that would make the intercept negative: through the origin instead.
  const LinkFit g = fit_link({{1e6, 1e-3}, {2e6, 3e-3}});
  EXPECT_EQ(g.latency_s, 0);
  EXPECT_GT(g.bytes_per_s, 0);
}

// Note [profile threads]: a CPU profile holds for its own threads per rank only.
TEST(Profile, ThreadsOtherThanTheProfilesAreNamed) {
  HardwareProfile p;
  p.threads = 1;
  EXPECT_EQ(profile_threads_mismatch(p, 1), "");
  const std::string why = profile_threads_mismatch(p, 2);
  EXPECT_NE(why.find("1 thread(s) per rank"), std::string::npos) << why;
  EXPECT_NE(why.find("run 2"), std::string::npos) << why;
  EXPECT_NE(why.find("--training.threads=1"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << "one line";
  p.device = "cuda";
  EXPECT_EQ(profile_threads_mismatch(p, 2), "") << "a GPU's times are not its host threads'";
}

TEST(Profile, JsonRoundTripsAndDamageIsOneLine) {
  HardwareProfile p;
  p.name = "x";
  p.gemm["bf16"] = {{1e6, 1e-3}, {1e9, 1e-1}};
  p.collectives["send_recv"][2] = {5e-6, 2e9};
  p.memory_bytes_per_s = 1e10;
  p.kernels["gelu/fp32"] = {{1e3, 1e-6}, {1e6, 5e-4}};
  p.op_overhead_s = 4e-6;
  p.contention[2] = 1.1;
  p.step_scale[1] = 1.2;
  p.tp_step_scale[4] = 1.6;
  p.tp_collective_scale[4] = {{49152, 0.4}, {196608, 1.1}};
  p.zero_collective_scale[4] = 0.5;
  p.pipeline_tp_latency_scale[4] = 0.6;
  p.loaded_collectives["all_gather"][4][2] = {7e-4, 1e9};
  const HardwareProfile q = profile_from_json(profile_json(p), "p.json");
  EXPECT_EQ(q.loaded_collectives.at("all_gather").at(4).at(2).latency_s, 7e-4);
  EXPECT_EQ(q.tp_step_scale.at(4), 1.6);
  EXPECT_EQ(q.tp_collective_scale.at(4).at(196608), 1.1);
  // Between the sizes measured, in log(bytes); the nearest beyond; 1 in other worlds.
  EXPECT_NEAR(q.tp_collective_scale_for(4, 98304), 0.75, 1e-12);
  EXPECT_EQ(q.tp_collective_scale_for(4, 1024), 0.4);
  EXPECT_EQ(q.tp_collective_scale_for(4, 1e9), 1.1);
  EXPECT_EQ(q.tp_collective_scale_for(8, 98304), 1.0);
  EXPECT_EQ(q.zero_collective_scale_for(4), 0.5);
  EXPECT_EQ(q.zero_collective_scale_for(2), 1.0) << "a world's own only";
  EXPECT_EQ(q.pipeline_tp_latency_scale_for(4), 0.6);
  EXPECT_FALSE(q.pipeline_tp_latency_scale_for(8)) << "a world's own only";
  EXPECT_EQ(profile_json(q), profile_json(p));
  auto error = [](const std::string& text) {
    try {
      profile_from_json(nlohmann::json::parse(text), "bad.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(R"({"format":2})").find("is not a Strata hardware profile"), std::string::npos);
  EXPECT_NE(error(R"({"format":1})").find("has no gemm rates"), std::string::npos);
  EXPECT_NE(error(R"({"format":1,"gemm":{"fp32":[{"flops":1}]}})").find("lacks seconds"),
            std::string::npos);
  EXPECT_NE(error(R"({"format":1,"gemm":{"fp32":[{"flops":1,"seconds":1}]},)"
                  R"("memory_bytes_per_s":-1})")
                .find("memory_bytes_per_s must be a number >= 0"),
            std::string::npos);
  EXPECT_NE(error(R"({"format":1,"gemm":{"fp32":[{"flops":1,"seconds":1}]},)"
                  R"("collectives":{"all_reduce":{"four":{"bytes_per_s":1}}}})")
                .find("'four' is not a rank count"),
            std::string::npos);
  EXPECT_NE(error(R"({"format":1,"gemm":{"fp32":[{"flops":1,"seconds":1}]},)"
                  R"("loaded_collectives":{"all_reduce":{"4":{"2":{"latency_s":1}}}}})")
                .find("loaded_collectives.all_reduce.4.2 needs bytes_per_s > 0"),
            std::string::npos);
  EXPECT_NE(error(R"({"format":1,"gemm":{"fp32":[{"flops":1,"seconds":1}]},)"
                  R"("step_scale":{"2":0.1}})")
                .find("step_scale.2 must be a number >= 0.5"),
            std::string::npos);
  EXPECT_NE(error(R"({"format":1,"gemm":{"fp32":[{"flops":1,"seconds":1}]},)"
                  R"("zero_collective_scale":{"4":0}})")
                .find("zero_collective_scale.4 must be a number >= 0.1"),
            std::string::npos);
  EXPECT_NE(error(R"({"format":1,"gemm":{"fp32":[{"flops":1,"seconds":1}]},)"
                  R"("pipeline_tp_latency_scale":{"4":0.05}})")
                .find("pipeline_tp_latency_scale.4 must be a number >= 0.1"),
            std::string::npos);
}

TEST(Profile, DatasheetProfilesLoad) {
  for (const char* name : {"a100-80gb", "h100-sxm", "h200"}) {
    const HardwareProfile p = load_profile(source_dir() + "/profiles/" + name + ".json");
    EXPECT_EQ(p.device, "cuda") << name;
    EXPECT_GT(p.peak_flops("bf16"), 2e14) << name;
    EXPECT_GT(p.device_memory_bytes, 70e9) << name;
    // A 1 GiB gradient all-reduce over 8 GPUs of a node takes milliseconds, over 64 more.
    const double in_node = p.collective_seconds("all_reduce", 8, 1 << 30);
    EXPECT_GT(in_node, 1e-3) << name;
    EXPECT_LT(in_node, 2e-2) << name;
    EXPECT_GT(p.collective_seconds("all_reduce", 64, 1 << 30), 4 * in_node) << name;
  }
}

TEST(Profile, AdamWIsTimedPastTheCaches) {
  // Note [AdamW past the caches]: the full sweep times the update up to 16 Mi elements
  // (256 MiB of parameters, gradients and moments), in tensors no larger than a
  // mid-sized model's weight, in ascending size; the quick sweep one small point.
  const auto full = adamw_calibration_shapes(false);
  ASSERT_GE(full.size(), 3u);
  EXPECT_GE(full.back().elements, int64_t{16} << 20);
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_LE(full[i].per_tensor, kAdamWLargestTensor) << i;
    EXPECT_EQ(full[i].elements % full[i].per_tensor, 0) << i;
    if (i > 0) EXPECT_GT(full[i].elements, full[i - 1].elements) << i;
  }
  EXPECT_GE(full.back().elements / full.back().per_tensor, 64) << "many tensors, as a model";
  const auto quick = adamw_calibration_shapes(true);
  ASSERT_EQ(quick.size(), 1u);
  EXPECT_LE(quick[0].elements, int64_t{1} << 20);
}

TEST(Profile, CalibrateMeasuresThisMachine) {
  // The quick sweep (fewer sizes and repeats) over 2..4 ranks: every part of the
  // profile, the pairs of the 4-rank world timed all at once too.
  const std::string out = temp_dir("calibrate") + "/profile.json";
  auto r = run(strata_bin() + " calibrate --nproc 4 --quick -o " + out, 180);
  ASSERT_EQ(r.status, 0) << r.output;
  const HardwareProfile p = load_profile(out);
  for (const char* d : {"fp32", "bf16"}) {
    ASSERT_GE(p.gemm.at(d).size(), 2u) << d;
    EXPECT_GT(p.peak_flops(d), 1e8) << d;
  }
  EXPECT_GT(p.memory_bytes_per_s, 1e8);
  for (const char* k :
       {"cross_entropy", "adamw", "linear/fp32", "attention/bf16", "gelu/fp32", "layer_norm/bf16"})
    EXPECT_GE(p.kernels.count(k) ? p.kernels.at(k).size() : 0u, 1u) << k;
  EXPECT_GT(p.op_overhead_s, 0);
  EXPECT_GE(p.contention.at(2), 1.0);
  // Note [calibrated worlds]: 1, 2 and 4 ranks; 3 is interpolated.
  EXPECT_EQ(p.step_scale.count(3), 0u);
  EXPECT_EQ(p.contention.count(3), 0u);
  EXPECT_EQ(p.step_scale.count(4), 1u);
  EXPECT_NE(r.output.find("worlds of 1, 2, 4 rank(s)"), std::string::npos) << r.output;
  for (int64_t g : {1, 2}) {  // near 1: the kernels' sum is most of a step
    EXPECT_GT(p.step_scale.at(g), 0.5) << g;
    EXPECT_LT(p.step_scale.at(g), 3.0) << g;
  }
  // The tensor-parallel reference runs where 4 ranks outnumber the cores (Note
  // [tensor-parallel step scale]).
  if (std::thread::hardware_concurrency() < 4) {
    ASSERT_EQ(p.tp_step_scale.count(4), 1u) << r.output;
    EXPECT_GT(p.tp_step_scale.at(4), 0.5);
    EXPECT_LT(p.tp_step_scale.at(4), 5.0);
    // Note [tensor-parallel collectives in a run]: fitted within its bounds.
    ASSERT_EQ(p.tp_collective_scale.count(4), 1u) << r.output;
    ASSERT_EQ(p.tp_collective_scale.at(4).size(), 2u) << "micro-batches 1 and 4";
    for (const auto& [bytes, x] : p.tp_collective_scale.at(4)) {
      EXPECT_GE(x, kLeastTpCollectiveScale) << bytes;
      EXPECT_LE(x, kMostTpCollectiveScale) << bytes;
    }
    EXPECT_NE(r.output.find("their tp collectives over the loaded fits:"), std::string::npos)
        << r.output;
    // Note [ZeRO collectives in a loaded world]: fitted within its bounds.
    ASSERT_EQ(p.zero_collective_scale.count(4), 1u) << r.output;
    EXPECT_GE(p.zero_collective_scale.at(4), kLeastZeroCollectiveScale);
    EXPECT_LE(p.zero_collective_scale.at(4), kMostZeroCollectiveScale);
    EXPECT_NE(r.output.find("ZeRO-2 reference step on 4 ranks"), std::string::npos) << r.output;
    // Note [a pipeline's tp pair in a run]: fitted within its bounds.
    ASSERT_TRUE(p.pipeline_tp_latency_scale_for(4)) << r.output;
    EXPECT_GE(*p.pipeline_tp_latency_scale_for(4), kLeastTpCollectiveScale);
    EXPECT_LE(*p.pipeline_tp_latency_scale_for(4), kMostPipelineTpLatencyScale);
    EXPECT_NE(r.output.find("a pipeline's tp pair (pp=2 x tp=2) at micro-batch 1"),
              std::string::npos)
        << r.output;
  } else {
    EXPECT_TRUE(p.pipeline_tp_latency_scale.empty());
    EXPECT_TRUE(p.tp_step_scale.empty());
    EXPECT_TRUE(p.tp_collective_scale.empty());
    EXPECT_TRUE(p.zero_collective_scale.empty());
  }
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    ASSERT_TRUE(p.collectives.count(op) && p.collectives.at(op).count(2)) << op << "\n" << r.output;
    EXPECT_GT(p.collectives.at(op).at(2).bytes_per_s, 1e6) << op;
    ASSERT_TRUE(p.loaded_collectives.count(op) && p.loaded_collectives.at(op).count(4) &&
                p.loaded_collectives.at(op).at(4).count(2))
        << op << "\n"
        << r.output;
    EXPECT_GT(p.loaded_collectives.at(op).at(4).at(2).bytes_per_s, 1e6) << op;
  }
  EXPECT_EQ(p.loaded_collectives.at("all_reduce").size(), 1u) << "only the 4-rank world divides";
  EXPECT_NE(r.output.find("profile: " + out), std::string::npos) << r.output;
  // The machine's speed over the calibration (Note [calibration drift]): a range of the
  // one-rank mix's times, and the warning exactly when it spans more than 15%.
  const std::string drift = "one rank's mix took ";
  const size_t at = r.output.find(drift);
  ASSERT_NE(at, std::string::npos) << r.output;
  double lo = 0, hi = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + at + drift.size(), "%lf-%lf", &lo, &hi), 2) << r.output;
  EXPECT_GT(lo, 0);
  EXPECT_GE(hi, lo);
  // (Printed to 0.01 ms: a range within that of the threshold may go either way.)
  if (std::abs(hi - 1.15 * lo) > 0.01)
    EXPECT_EQ(r.output.find("warning: this machine's speed moved by") != std::string::npos,
              hi > 1.15 * lo)
        << r.output;
  // Planned on this machine's profile, the model's parts are timed here (Note [measured
  // parts]) at each micro-batch planned; --no-measure prices from the profile alone.
  const std::string plan = strata_bin() + " plan --nproc 2 --profile " + out +
                           " --data.source=synthetic --training.batch_size=4 --top 1 ";
  r = run(plan, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("timed the model's parts here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 2: "), std::string::npos) << "micro-batch 2 planned: " << r.output;
  // Note [the machine now]: the reference run here, its factor within bounds.
  const std::string now = "so every prediction takes ";
  const size_t speed_at = r.output.find(now);
  ASSERT_NE(speed_at, std::string::npos) << r.output;
  double speed = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + speed_at + now.size(), "%lf", &speed), 1) << r.output;
  EXPECT_GE(speed, kLeastSpeed);
  EXPECT_LE(speed, kMostSpeed);
  // Note [the machine now, shrunk]: the factor applied is the reading's lasting share.
  const size_t priced_at = r.output.find("the profile prices ");
  ASSERT_NE(priced_at, std::string::npos) << r.output;
  double priced_ms = 0, reading = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + priced_at, "the profile prices %lf (%lfx)", &priced_ms,
                        &reading),
            2)
      << r.output;
  EXPECT_NEAR(speed, speed_to_apply(reading), 0.01) << r.output;
  // Note [the machine's collectives now]: tp over both ranks, read the same way.
  const std::string coll = "spent ";
  const size_t coll_at = r.output.find(coll);
  ASSERT_NE(coll_at, std::string::npos) << r.output;
  double spent_ms = 0, coll_reading = 0, coll_factor = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + coll_at,
                        "spent %lf ms a step in its tp collectives where the profile prices %lf "
                        "(%lfx), so the world's collectives take %lfx",
                        &spent_ms, &priced_ms, &coll_reading, &coll_factor),
            4)
      << r.output;
  EXPECT_GT(spent_ms, 0);
  EXPECT_NEAR(coll_factor, speed_to_apply(coll_reading), 0.01) << r.output;
  // The factors given (an earlier plan's) replace the runs: the world's collectives
  // take the second, every other term the first.
  auto planned = [&](const std::string& now) {
    auto p = run(strata_bin() + " plan --nproc 2 --profile " + out +
                     " --data.source=synthetic --training.batch_size=4 --top 1000 --json "
                     "--no-measure --machine-now " +
                     now + " 2>/dev/null",
                 60);
    EXPECT_EQ(p.status, 0) << p.output;
    std::map<std::string, nlohmann::json> by_layout;
    for (const auto& row : nlohmann::json::parse(p.output)) by_layout[row["layout"]] = row;
    return by_layout;
  };
  const auto same = planned("1.2"), apart = planned("1.2,0.8");
  const std::string tp2 = "dp=1 tp=2 pp=1 zero=0 mb=1 recompute=none";
  const std::string dp2 = "dp=2 tp=1 pp=1 zero=0 mb=1 recompute=none";
  ASSERT_TRUE(same.count(tp2) && same.count(dp2) && apart.count(tp2)) << tp2;
  const double tp_comm = same.at(tp2)["tp_comm_s"].get<double>();
  ASSERT_GT(tp_comm, 0);
  EXPECT_NEAR(apart.at(tp2)["tp_comm_s"].get<double>(), tp_comm * 0.8 / 1.2, 1e-6 * tp_comm);
  for (const char* term : {"compute_s", "optimizer_s"})
    EXPECT_NEAR(apart.at(tp2)[term].get<double>(), same.at(tp2)[term].get<double>(),
                1e-9 * same.at(tp2)[term].get<double>())
        << term;
  EXPECT_LT(apart.at(dp2)["dp_exposed_s"].get<double>(), same.at(dp2)["dp_exposed_s"].get<double>())
      << "dp over the world: the world's all-reduce";
  for (const char* bad : {"fast", "1.2,", "1.2x", "3", "1.2,0.8,1"})
    expect_one_error_line(plan + "--machine-now " + bad, "must be SPEED or SPEED,COLLECTIVES");
  r = run(plan + "--no-measure", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("timed the model's parts"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("the machine now"), std::string::npos) << r.output;
  expect_one_error_line(strata_bin() + " calibrate --nproc 0", "--nproc 0 must be at least 1");
}

namespace {
// `strata plan` over 2 ranks with the A100 datasheet profile and synthetic data.
std::string a100_plan(const std::string& args) {
  return strata_bin() + " plan --nproc 2 --profile " + source_dir() +
         "/profiles/a100-80gb.json --data.source=synthetic " + args;
}
}  // namespace

TEST(Plan, RanksTheLayoutsThatFitAndSaysHowToRunThem) {
  // The debug GPT on 2 ranks with the A100 datasheet profile: a table of the fastest
  // predicted layouts, in order, with the overrides of the first; a memory limit
  // nothing fits is one line.
  const std::string base = a100_plan("--training.batch_size=8 ");
  auto r = run(base + "--top 3", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("layouts start"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("run the first: --parallel.dp="), std::string::npos) << r.output;
  r = run(base + "--top 50 --json 2>/dev/null", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_GE(j.size(), 10u);
  for (size_t i = 1; i < j.size(); ++i)
    EXPECT_LE(j[i - 1]["step_s"].get<double>(), j[i]["step_s"].get<double>()) << "ranked";
  for (const auto& row : j) EXPECT_LE(row["peak_bytes"].get<double>() * 1.08, 80.0 * (1 << 30));
  expect_one_error_line(base + "--device-memory 1MiB", "fits 1 MiB per device");
  expect_one_error_line(strata_bin() + " plan --nproc 2 --profile /nonexistent.json",
                        "no hardware profile at /nonexistent.json");
}

TEST(Plan, FixHoldsKeysAndRunTopRanksByMeasurement) {
  // --fix keeps only layouts with the config's value for those keys; --run-top trains
  // the first K predicted (here 2 short runs of the debug GPT on 2 ranks) and ranks
  // them by their measured step.
  const std::string base =
      a100_plan("--training.batch_size=4 --parallel.tp=2 --memory.recompute=none ");
  auto r = run(base + "--fix parallel.tp,memory.recompute --top 1000 --json 2>/dev/null", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_GE(j.size(), 2u);
  for (const auto& row : j) {
    const std::string l = row["layout"];
    EXPECT_NE(l.find("tp=2"), std::string::npos) << l;
    EXPECT_NE(l.find("recompute=none"), std::string::npos) << l;
  }
  r = run(base +
              "--parallel.zero=0 --parallel.sequence_parallel=false --fix "
              "parallel.tp,memory.recompute,parallel.zero,parallel.sequence_parallel --run-top 2 "
              "--run-steps 4 --json 2>/dev/null",
          180);
  ASSERT_EQ(r.status, 0) << r.output;
  // run() merges stderr, where each run is announced ("strata plan: running 1/2: ...").
  EXPECT_NE(r.output.find("strata plan: running 2/2"), std::string::npos) << r.output;
  j = nlohmann::json::parse(r.output.substr(r.output.find("\n[") + 1));
  ASSERT_GE(j.size(), 2u);
  EXPECT_GT(j[0]["measured_step_s"].get<double>(), 0);
  EXPECT_LE(j[0]["measured_step_s"].get<double>(), j[1]["measured_step_s"].get<double>());
  expect_one_error_line(base + "--fix parallel.bogus", "--fix parallel.bogus is not a layout key");
  expect_one_error_line(base + "--run-top 1 --run-steps 2", "--run-steps 2 must exceed");
}

TEST(Plan, ZeroPapers7_5BOn64DevicesThroughThePlan) {
  // Rajbhandari et al. 2020, figure 1: a 7.5B model on 64 devices with mixed-precision
  // Adam holds 120, 31.4, 16.6 and 1.9 GB of model states per device at ZeRO stages 0-3.
  // strata plan over the ZeRO stages of a GPT that size (d 4096, 36 blocks: 7.46B, so the
  // paper's figures scale by 7.46/7.5), dp=64 on the A100 profile: each layout's model
  // states, and with a 32 GB device (the paper's V100) stages 0 and 1 do not fit.
  ModelConfig mc;
  mc.flavour = "gpt2-124m";
  mc.n_layer = 36, mc.d_model = 4096, mc.n_head = 32;
  const double psi = static_cast<double>(count_parameters(resolve_model_spec(mc, {})).total);
  ASSERT_NEAR(psi / 7.5e9, 1.0, 0.01);
  const std::string base = strata_bin() + " plan --nproc 64 --profile " + source_dir() +
                           "/profiles/a100-80gb.json --data.source=synthetic "
                           "--model.flavour=gpt2-124m --model.n_layer=36 --model.d_model=4096 "
                           "--model.n_head=32 --training.batch_size=64 --memory.precision=bf16 "
                           "--memory.master_weights=true --parallel.tp=1 --parallel.pp=1 "
                           "--memory.recompute=full --training.micro_batch_size=1 --fix "
                           "parallel.tp,parallel.pp,memory.recompute,training.micro_batch_size "
                           "--top 100 --json ";
  auto r = run(base + "--device-memory 1TiB 2>/dev/null", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  const double want[] = {120, 31.4, 16.6, 1.9};
  std::set<std::string> seen;
  for (const auto& row : nlohmann::json::parse(r.output)) {
    const std::string l = row["layout"];
    if (l.find("offload") != std::string::npos) continue;
    const int stage = l[l.find("zero=") + 5] - '0';
    EXPECT_NE(l.find("dp=64"), std::string::npos) << l;
    EXPECT_NEAR(row["memory"]["model_states"].get<double>() / 1e9, want[stage] * psi / 7.5e9, 0.05)
        << l;
    seen.insert(l.substr(l.find("zero=")));
  }
  EXPECT_EQ(seen.size(), 4u) << "a layout for each stage";
  r = run(base + "--device-memory 32GB 2>/dev/null", 60);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const auto& row : nlohmann::json::parse(r.output)) {
    const std::string l = row["layout"];
    if (l.find("offload") != std::string::npos) continue;
    EXPECT_TRUE(l.find("zero=2") != std::string::npos || l.find("zero=3") != std::string::npos)
        << l << " fits 32 GB";
  }
}
