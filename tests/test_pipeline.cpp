// Pipeline parallelism in training (parallel/pipeline through parallelize and the
// trainer): pp runs against one process on the same seed and global batch, checkpoints
// moving between pp layouts, and the settings a pipeline refuses.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>

#include "strata/core/errors.h"
#include "strata/models/flavours.h"
#include "strata/parallel/pipeline/profile.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

namespace {
// Debug GPT (4 blocks) on the KJV, fp32, dropout 0, global batch 8 in micro-batches of
// 2 (4 per step at dp=1), context 64, 20 steps, evaluation at steps 10 and 20.
const std::string kCommon =
    "--training.steps=20 --training.batch_size=8 --training.micro_batch_size=2 "
    "--model.dropout=0 --model.seq_len=64 --training.eval_interval=10 ";

struct Case {
  std::string name, model, layout;
  double tol = 1e-5, param_tol = 1e-5;
  // The evaluation loss too (at dp > 1 each replica evaluates other samples).
  bool eval = true;
};

void expect_match_one_process(const std::string& group, const std::vector<Case>& cases) {
  std::map<std::string, std::string> refs;  // one reference run per model
  for (const Case& c : cases) {
    if (!refs.contains(c.model))
      refs[c.model] = train_ok("pp-ref-" + group + "-" + c.name, kCommon + c.model);
    const std::string& ref = refs[c.model];
    const std::string dir = train_ok("pp-" + c.name, kCommon + c.model + c.layout);
    expect_losses_match(ref, dir, 0, c.tol, c.name);
    EXPECT_LT(max_param_diff(dir, ref, 20), c.param_tol) << c.name;
    if (!c.eval) continue;
    // Evaluation runs through the stages too.
    const auto want = read_metrics(ref + "/metrics.jsonl").back();
    const auto got = read_metrics(dir + "/metrics.jsonl").back();
    ASSERT_TRUE(got.contains("eval_loss")) << c.name;
    EXPECT_NEAR(got["eval_loss"].get<double>(), want["eval_loss"].get<double>(),
                c.tol * want["eval_loss"].get<double>())
        << c.name;
  }
}

const std::string pp2 = "--nproc 2 --parallel.pp=2 ", pp4 = "--nproc 4 --parallel.pp=4 ";
}  // namespace

TEST(PipelineParallel, SchedulesMatchOneProcess) {
  // Same seed, same global batch, the same initial weights (each stage keeps its
  // blocks): losses within 1e-5 relative at every step, parameters (each stage's read
  // back from the checkpoints) within 1e-5 in L2, the evaluation loss too. The tied
  // embedding's two copies (first and last stage) get the summed gradient.
  expect_match_one_process(
      "schedules",
      {
          {"1f1b", "", pp2},
          {"gpipe", "", pp2 + "--parallel.pp_schedule=gpipe "},
          {"interleaved", "", pp2 + "--parallel.pp_schedule=interleaved --parallel.pp_virtual=2 "},
          {"zb-h1", "", pp2 + "--parallel.pp_schedule=zb-h1 "},
          {"pp4", "", pp4},
          {"uneven", "", pp2 + "--parallel.pp_partition=3,1 "},
      });
}

TEST(PipelineParallel, ModelsPrecisionRecomputeAndDataParallelMatchOneProcess) {
  expect_match_one_process(
      "mixed",
      {
          {"untied", "--model.tied_embedding=false ", pp2},
          // The untied head is a linear too: its weight gradient is deferred.
          {"zb-h1-untied", "--model.tied_embedding=false ", pp2 + "--parallel.pp_schedule=zb-h1 "},
          {"bert", "--model.flavour=bert-debug ", pp2},
          {"full-recompute", "--memory.recompute=full ", pp2},
          {"dp2-ddp", "", "--nproc 4 --parallel.pp=2 ", 1e-5, 1e-5, /*eval=*/false},
          // ZeRO shards each stage's states over dp; the tied embedding's two
          // copies are summed before the root's reduction.
          {"dp2-zero1", "", "--nproc 4 --parallel.pp=2 --parallel.zero=1 ", 1e-5, 1e-5,
           /*eval=*/false},
          {"dp2-zero2", "", "--nproc 4 --parallel.pp=2 --parallel.zero=2 ", 1e-5, 1e-5,
           /*eval=*/false},
          // Half precision against one-process half precision: the same bounds as tensor
          // parallelism's (rounding order differs only at the stage boundary's cast).
          {"bf16", "--memory.precision=bf16 ", pp2, 1e-4, 3e-2},
      });
}

TEST(PipelineParallel, Fp16OverflowOnOneStageSkipsTheStepOnEveryStage) {
  // Rank 1 (the last stage) alone gets an inf in a gradient at step 3: both stages
  // skip, the scale halves, and the losses stay those of one process that skipped the
  // same step.
  // 6 steps: fp16 GEMMs are slow on CPUs without half instructions.
  const std::string common =
      kCommon + "--training.steps=6 --memory.precision=fp16 --checkpoint.save_final=false ";
  const std::string ref = temp_dir("pp-fp16-ref");
  auto r = run("env STRATA_INJECT_INF=0:3 " + train_command(ref, common), 240);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string dir = temp_dir("pp-fp16");
  r = run("env STRATA_INJECT_INF=1:3 " + train_command(dir, common + pp2), 240);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto recs = read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 6u);
  EXPECT_TRUE(recs[2]["skipped"].get<bool>());
  EXPECT_EQ(recs[2]["loss_scale"].get<double>(), 32768);
  expect_losses_match(ref, dir, 0, 1e-4, "fp16 pp2 overflow");
}

TEST(PipelineParallel, CheckpointsMoveBetweenPpLayouts) {
  // Written at pp=2, resumed at pp=1 and at pp=4, and the reverse: steps 6-20 match the
  // uninterrupted run of the new layout (1e-5).
  const std::string ck = "--checkpoint.interval=5 --checkpoint.keep=4 ";
  const std::string one = train_ok("pp-ck-one", kCommon + ck);
  const std::string two = train_ok("pp-ck-two", kCommon + ck + pp2);
  const std::string four = train_ok("pp-ck-four", kCommon + ck + pp4);
  auto resume = [&](const std::string& name, const std::string& from, const std::string& layout) {
    return train_ok(name, kCommon + layout + "--checkpoint.save_final=false --checkpoint.resume=" +
                              from + "/checkpoints/step-00000005");
  };
  expect_losses_match(one, resume("pp-ck-2to1", two, ""), 5, 1e-5, "pp2 -> pp1");
  expect_losses_match(four, resume("pp-ck-2to4", two, pp4), 5, 1e-5, "pp2 -> pp4");
  expect_losses_match(two, resume("pp-ck-1to2", one, pp2), 5, 1e-5, "pp1 -> pp2");
  expect_losses_match(two, resume("pp-ck-4to2", four, pp2), 5, 1e-5, "pp4 -> pp2");
}

TEST(PipelineParallel, BadSettingsAreOneClearLine) {
  const std::string dir = temp_dir("pp-bad");
  expect_one_error_line(train_command(dir, kCommon + "--nproc 4 --parallel.pp=4 "
                                                     "--model.n_layer=3"),
                        "pp=4 is larger than n_layer=3; choose pp <= 3");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--parallel.pp_partition=3,2"),
                        "parallel.pp_partition='3,2' gives 2 stages and 5 blocks; it needs pp=2 "
                        "counts summing to the model's 4 blocks");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--parallel.pp_partition=4,0"),
                        "'0' is not a block count of at least 1");
  expect_one_error_line(
      train_command(dir, kCommon + pp2 +
                             "--model.n_layer=6 --parallel.pp_schedule=interleaved "
                             "--parallel.pp_virtual=2"),
      "needs blocks (6) divisible by 4");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--training.micro_batch_size=8"),
                        "the 1f1b schedule needs at least pp=2 micro-batches per step (got 1)");
  expect_one_error_line(train_command(dir, kCommon + "--parallel.pp_virtual=2"),
                        "parallel.pp_virtual=2 applies to the interleaved schedule only");
  expect_one_error_line(train_command(dir, kCommon + pp2 + "--parallel.zero=3"),
                        "ZeRO-3 gathers and frees each block around one forward and backward");
  expect_one_error_line(
      train_command(dir, kCommon + "--nproc 4 --parallel.pp=2 --parallel.pp_schedule=zb-h1"),
      "parallel.pp_schedule=zb-h1 with dp=2: its deferred weight gradients");
  expect_one_error_line(train_command(dir, kCommon + "--nproc 4 --parallel.pp=2 --parallel.tp=2 "
                                                     "--parallel.pp_schedule=zb-h1"),
                        "parallel.pp_schedule=zb-h1 with tp=2: its deferred weight gradients");
  expect_one_error_line(
      train_command(dir, kCommon + pp2 + "--model.flavour=mlp --data.source=fashion-mnist"),
      "has no transformer blocks to cut into stages");
}

namespace {
// Stage 0's activation peak (tracked, the last step) of a 2-step pp=2 run with m
// micro-batches of 2 samples.
double stage0_activation_peak(const std::string& schedule, int64_t m) {
  const std::string dir =
      train_ok("pp-mem-" + schedule + "-" + std::to_string(m),
               "--training.steps=2 --model.dropout=0 --model.seq_len=64 "
               "--training.micro_batch_size=2 --checkpoint.save_final=false "
               "--parallel.pp_partition=uniform --training.batch_size=" +
                   std::to_string(2 * m) + " " + pp2 + "--parallel.pp_schedule=" + schedule);
  return read_metrics(dir + "/metrics.jsonl").back()["mem_peak"]["activations"].get<double>();
}
}  // namespace

TEST(PipelineParallel, StageZeroHoldsMMicroBatchesUnderGpipeAndPUnder1F1B) {
  // With a micro-batch's activations a and a fixed part c (the tracking allocator's
  // activation category on stage 0, rank 0), GPipe holds m micro-batches (its peak is
  // linear in m: the step from m=4 to 8 is twice that from 2 to 4) and 1F1B holds
  // p = 2 whatever m (its peak at m=8 is GPipe's at m=2, where both hold 2).
  const double g2 = stage0_activation_peak("gpipe", 2), g4 = stage0_activation_peak("gpipe", 4),
               g8 = stage0_activation_peak("gpipe", 8), f8 = stage0_activation_peak("1f1b", 8);
  std::cout << "stage 0 activation peak (bytes): gpipe m=2 " << g2 << ", m=4 " << g4 << ", m=8 "
            << g8 << "; 1f1b m=8 " << f8 << "\n";
  const double a = (g4 - g2) / 2;
  ASSERT_GT(a, 0);
  EXPECT_NEAR(g8 - g4, 4 * a, 0.1 * 4 * a) << g2 << " " << g4 << " " << g8;
  EXPECT_NEAR(f8, g2, 0.05 * g2) << "1f1b at m=8 " << f8 << ", gpipe at m=2 " << g2;
}

TEST(PipelineParallel, StepsRecordTheirBubbleTraceAndGanttChart) {
  // Every step's metrics carry the measured bubble of the pp group; logging.trace_step
  // writes that step's timeline of every stage as a Chrome trace, and `strata report`
  // draws it as a Gantt chart.
  const std::string dir = train_ok("pp-trace",
                                   "--training.steps=3 --model.seq_len=64 --training.batch_size=8 "
                                   "--training.micro_batch_size=2 --logging.trace_step=2 "
                                   "--checkpoint.save_final=false " +
                                       pp2);
  const auto recs = read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& r : recs) {
    ASSERT_TRUE(r.contains("pp")) << r.dump();
    const double bubble = r["pp"]["bubble"].get<double>();
    EXPECT_GT(bubble, 0);  // two stages cannot both be busy all the time
    EXPECT_LT(bubble, 1);
    ASSERT_EQ(r["pp"]["busy_ms"].size(), 2u);
    // The schedule simulated with the step's own durations (bench/pipeline compares it
    // with the measured step): at least the busiest stage's work.
    EXPECT_GE(
        r["pp"]["predicted_ms"].get<double>(),
        std::max(r["pp"]["busy_ms"][0].get<double>(), r["pp"]["busy_ms"][1].get<double>()) - 1e-6);
    for (const auto& b : r["pp"]["busy_ms"]) EXPECT_GT(b.get<double>(), 0);
    // Every rank's peak is gathered (Note [every rank's peak]): the last stage, with
    // the head's logits, peaks above rank 0.
    EXPECT_EQ(r["mem_peak_max"]["rank"].get<int64_t>(), 1) << r.dump();
    EXPECT_GT(r["mem_peak_max"]["bytes"].get<double>(), r["mem_peak_total"].get<double>());
  }
  std::ifstream in(dir + "/trace.json");
  const auto trace = nlohmann::json::parse(in);
  std::map<int64_t, int64_t> per_stage;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") {
      ++per_stage[e["tid"].get<int64_t>()];
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
  ASSERT_EQ(per_stage.size(), 2u);
  for (const auto& [stage, n] : per_stage) EXPECT_EQ(n, 8) << "stage " << stage;  // 4 F + 4 B
  auto r = run(strata_bin() + " report " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream html(dir + "/report.html");
  const std::string page((std::istreambuf_iterator<char>(html)), {});
  EXPECT_NE(page.find("<h2>Pipeline</h2>"), std::string::npos);
  EXPECT_NE(page.find("Schedule of step 2 as run"), std::string::npos);
  EXPECT_NE(page.find("0B3 (backward)"), std::string::npos);  // the last backward
  // `auto` balanced the stages by a profile of this machine, cached in the run
  // directory, and config.toml records the partition the run used.
  EXPECT_TRUE(std::filesystem::exists(dir + "/pp_profile.json"));
  std::ifstream cfg(dir + "/config.toml");
  const std::string toml((std::istreambuf_iterator<char>(cfg)), {});
  EXPECT_TRUE(toml.find("pp_partition = \"3,1\"") != std::string::npos ||
              toml.find("pp_partition = \"2,2\"") != std::string::npos ||
              toml.find("pp_partition = \"1,3\"") != std::string::npos)
      << toml;
}

TEST(PipelineParallel, AutoPartitionComesFromAProfileOfThisMachine) {
  // The debug GPT's head (vocabulary 8192 against d_model 96) costs several blocks:
  // the profile sees it, and a second run reads the cached profile.
  ModelConfig mc;
  mc.flavour = "debug";
  mc.seq_len = 64;
  const ModelSpec spec = resolve_model_spec(mc, {});
  // One intra-op thread: beside another test on two cores, several threads' barriers
  // spin against it and one timing can come out 100x too long (a block took 0.22 s).
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const StageCosts c = profile_stage_costs(spec, 2, at::Device(at::kCPU), 7);
  at::set_num_threads(threads);
  ASSERT_EQ(c.block.size(), static_cast<size_t>(spec.n_layer));
  EXPECT_GT(c.block[0], 0);
  EXPECT_GT(c.last, 2 * c.block[0]) << "block " << c.block[0] << " s, head " << c.last << " s";
  const std::string args =
      "--training.steps=1 --model.seq_len=64 --training.batch_size=4 "
      "--training.micro_batch_size=2 --checkpoint.save_final=false " +
      pp2;
  const std::string dir = temp_dir("pp-profile");
  auto r = run(train_command(dir, args));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline profile: a block"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(measured now)"), std::string::npos) << r.output;
  r = run(train_command(dir, args));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(cached in " + dir + "/pp_profile.json)"), std::string::npos)
      << r.output;
}

TEST(PipelineParallel, PartRoundsAreSizedByTheirFirst) {
  // Note [rounds sized by their first]: the budget's time over one round, within its
  // bounds; the first round counts among them.
  EXPECT_EQ(rounds_for({3.0, 5, 200}, 0.1), 30);
  EXPECT_EQ(rounds_for({3.0, 5, 200}, 1.0), 5) << "at least the least";
  EXPECT_EQ(rounds_for({3.0, 5, 200}, 1e-4), 200) << "at most the most";
  EXPECT_EQ(rounds_for({3.0, 5, 200}, 0), 200) << "a round timed as nothing";
  EXPECT_EQ(rounds_for({0, 3, 3}, 0.5), 3);
  EXPECT_THROW(rounds_for({1.0, 0, 3}, 0.5), Error);
  EXPECT_THROW(rounds_for({1.0, 4, 3}, 0.5), Error);
  // Timed: a tiny model's parts, however long a round takes, give exactly the bounds'
  // count of samples when the bounds meet, and the most when the budget is endless.
  ModelConfig mc;
  mc.flavour = "debug";
  mc.seq_len = 16;
  mc.n_layer = 1;
  const std::vector<PartsToTime> jobs{{resolve_model_spec(mc, {}), 1}};
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto fixed = time_part_rounds(jobs, at::Device(at::kCPU), RoundBudget{0, 2, 2});
  const auto endless = time_part_rounds(jobs, at::Device(at::kCPU), RoundBudget{1e9, 1, 3});
  at::set_num_threads(threads);
  for (size_t part = 0; part < 3; ++part) {
    EXPECT_EQ(fixed[0][part].size(), 2u) << part;
    EXPECT_EQ(endless[0][part].size(), 3u) << part;
  }
}

TEST(PipelineParallel, OnlyThePartsMarkedWarmRunUntimedFirst) {
  // Note [warm-up runs where they count]: a part that runs long is timed without its
  // untimed run; the others keep theirs, and every part is still timed once a round.
  const std::vector<bool> warm{true, false, true};
  const std::vector<PartRun> order = part_run_order(3, 2, warm);
  ASSERT_EQ(order.size(), 2u * (3 + 2));
  std::vector<int> timed(3, 0), untimed(3, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    ++(order[i].timed ? timed : untimed)[order[i].part];
    if (!order[i].timed) continue;
    const bool after_itself = i > 0 && order[i - 1].part == order[i].part && !order[i - 1].timed;
    EXPECT_EQ(after_itself, warm[order[i].part]) << "run " << i;
  }
  EXPECT_EQ(timed, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(untimed, (std::vector<int>{2, 0, 2}));
  EXPECT_THROW(part_run_order(3, 2, {true, false}), Error) << "a flag per part";
}

TEST(PipelineParallel, EveryPartIsTimedRightAfterAnUntimedRunOfItself) {
  // Note [a part timed warm]: a part timed cold after another part's larger shapes
  // priced the debug GPT's micro-batch 1 a fifth over its runs.
  const size_t parts = 6;
  const int repeats = 4;
  const std::vector<PartRun> order = part_run_order(parts, repeats);
  ASSERT_EQ(order.size(), parts * 2 * repeats);
  std::vector<int> timed(parts, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    if (!order[i].timed) continue;
    ASSERT_GT(i, 0u);
    EXPECT_EQ(order[i - 1].part, order[i].part) << "run " << i;
    EXPECT_FALSE(order[i - 1].timed) << "run " << i;
    ++timed[order[i].part];
  }
  for (size_t p = 0; p < parts; ++p) EXPECT_EQ(timed[p], repeats) << "part " << p;
  // Round-robin: a round times every part before the next round times any again.
  for (int r = 0; r < repeats; ++r)
    for (size_t p = 0; p < parts; ++p) {
      const PartRun& t = order[2 * (r * parts + p) + 1];
      EXPECT_TRUE(t.timed);
      EXPECT_EQ(t.part, p);
    }
}
