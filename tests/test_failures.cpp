// Training that survives failures (Note [restarts], Note [heartbeat], Note [async
// checkpoint]): a killed rank restarts the run from the latest checkpoint and the
// losses continue bitwise; a stopped or spinning rank is named within
// parallel.timeout_s; a checkpoint written in the background is the same checkpoint,
// and a kill during its write leaves `latest` on the previous one.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "strata/core/files.h"
#include "strata/distributed/hang_watch.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

namespace {
// Debug GPT on the KJV, fp32, dropout 0, 2 ranks, 20 steps, a checkpoint every 5.
const std::string kRun =
    "--nproc 2 --training.steps=20 --training.batch_size=8 --model.dropout=0 "
    "--model.seq_len=64 --checkpoint.interval=5 ";

// The run's losses by step, each step once (a resumed run rewrote what followed its
// checkpoint).
std::vector<double> losses_by_step(const std::string& dir) {
  std::vector<double> out;
  for (const auto& r : read_metrics(dir + "/metrics.jsonl")) {
    EXPECT_EQ(r["step"].get<size_t>(), out.size() + 1) << dir << ": steps out of order";
    out.push_back(r["loss"].get<double>());
  }
  return out;
}

const std::vector<double>& reference() {
  static const std::vector<double> ref = losses_by_step(train_ok("fail-ref", kRun));
  return ref;
}

// The seconds in the launcher's "rank R hung: silent for X s" / "computing step N for X s".
double hung_after_s(const std::string& out, const std::string& how) {
  std::smatch m;
  const std::regex re(how + " ([0-9.]+) s");
  EXPECT_TRUE(std::regex_search(out, m, re)) << out;
  return m.empty() ? 1e9 : std::stod(m[1]);
}
}  // namespace

TEST(HangWatch, ParsesBeatsAndBlamesTheRankThatStoppedNotTheOnesWaiting) {
  RankBeat a, b;
  ASSERT_TRUE(parse_beat("hb 0 12 40 5000 wait all_reduce dp 41 4900 0,1,2,3", a));
  ASSERT_TRUE(parse_beat("hb 1 12 37 5000 compute all_reduce dp 40 100 0,1,2,3", b));
  EXPECT_FALSE(parse_beat("hb 1 12 x", b));
  EXPECT_FALSE(parse_beat("start 1 10", b));
  EXPECT_EQ(b.step, 12);
  EXPECT_EQ(b.seq, 40);
  EXPECT_TRUE(a.waiting);
  EXPECT_FALSE(b.waiting);
  // Nothing is late yet.
  EXPECT_FALSE(find_hang({a, b}));
  // Rank 1 went silent (SIGSTOP): it is blamed, not rank 0 that waits for it.
  b.silent_s = 5.2;
  b.proc_state = 'T';
  a.silent_s = 0.1;
  auto v = find_hang({a, b});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->hung, std::vector<int64_t>{1});
  EXPECT_NE(v->cause.find("rank 1 hung: silent for 5.2 s (process stopped)"), std::string::npos)
      << v->cause;
  // Beating but not progressing while computing: an endless loop.
  b.silent_s = 0.2;
  b.still_s = 6;
  v = find_hang({a, b});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->hung, std::vector<int64_t>{1});
  // A rank waiting that long is a victim; when all here wait, the peer is elsewhere.
  b.still_s = 0;
  ASSERT_TRUE(parse_beat("hb 1 12 38 5000 wait all_reduce dp 41 5100 0,1,2,3", b));
  a.silent_s = 0.3;  // rank 0 has waited 4.9 + 0.3 s
  v = find_hang({a, b});
  ASSERT_TRUE(v);
  EXPECT_TRUE(v->hung.empty());
  EXPECT_NE(v->cause.find("with ranks 0,1,2,3): rank(s) 2,3 on another node"), std::string::npos)
      << v->cause;
  // Ranks that have not beaten yet (setting up) are never blamed.
  RankBeat fresh;
  fresh.silent_s = 100;
  EXPECT_FALSE(find_hang({fresh}));
  const auto lines = flight_record({a, b});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("rank 0: waiting", 0), 0u) << lines[0];
}

TEST(Failures, KilledRankRestartsFromTheCheckpointAndContinuesBitwise) {
  // SIGKILL rank 1 at the start of step 12; the checkpoint of step 10 is the latest.
  const std::string dir = temp_dir("fail-kill");
  auto r = run("env STRATA_FAULT=kill:1:12 " + train_command(dir, kRun + "--max-restarts 1"), 300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "strata launch: restart 1 of 1 after: rank 1"), 1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "was killed by SIGKILL at step 12"), 2) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "restart 1: training resumed at step 10"), 1) << r.output;
  const auto got = losses_by_step(dir);
  const auto& want = reference();
  ASSERT_EQ(got.size(), 20u);
  ASSERT_EQ(want.size(), 20u);
  // CPU, deterministic: the restarted steps are the uninterrupted run's, bit for bit.
  for (size_t i = 10; i < 20; ++i) EXPECT_EQ(got[i], want[i]) << "step " << i + 1;
}

TEST(Failures, StoppedRankIsNamedWithinTheTimeoutAndTheRunRestarts) {
  // SIGSTOP: the process neither dies nor beats. parallel.timeout_s = 5.
  const std::string dir = temp_dir("fail-stop");
  auto r = run("env STRATA_FAULT=stop:1:12 " +
                   train_command(dir, kRun + "--max-restarts 1 --parallel.timeout_s=5"),
               300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_LE(hung_after_s(r.output, "rank 1 hung: silent for"), 5.0) << r.output;
  EXPECT_NE(r.output.find("(process stopped); last seen computing step 12"), std::string::npos)
      << r.output;
  // The flight record: what the other rank was doing.
  EXPECT_NE(r.output.find("strata launch:   rank 0: waiting"), std::string::npos) << r.output;
  const auto got = losses_by_step(dir);
  ASSERT_EQ(got.size(), 20u);
  for (size_t i = 10; i < 20; ++i) EXPECT_EQ(got[i], reference()[i]) << "step " << i + 1;
}

TEST(Failures, SpinningRankIsNamedAndUsedUpRestartsEndTheRunNamingTheCause) {
  // Rank 0 spins in step 7 on every start (its heartbeat thread still beats); one
  // restart allowed, then the launcher gives up with the cause.
  const std::string dir = temp_dir("fail-spin");
  auto r = run("env STRATA_FAULT=hang:0:7:always " +
                   train_command(dir, kRun + "--max-restarts 1 --parallel.timeout_s=3"),
               120);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "rank 0 hung: computing step 7 for"), 4) << r.output;
  EXPECT_LE(hung_after_s(r.output, "rank 0 hung: computing step 7 for"), 3.0) << r.output;
  EXPECT_EQ(count_lines_with(r.output,
                             "strata launch: giving up after 1 restart(s); last "
                             "failure: rank 0 hung: computing step 7"),
            1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "restart 1: training resumed at step 5"), 1) << r.output;
  EXPECT_EQ(run("pgrep -f '[l]ogging.run_dir=" + dir + "'", 10).output, "")
      << "a rank was left running";
}

TEST(Failures, AsyncCheckpointIsTheSameAndAKillDuringItsWriteLeavesLatestOnThePrevious) {
  // In the background, the same checkpoints: the run's losses are the reference's,
  // and each save reports its stall and, later, its write.
  const std::string async = train_ok("fail-async", kRun + "--checkpoint.async=true");
  EXPECT_EQ(losses_by_step(async), reference());
  int saves = 0, written = 0;
  for (const auto& rec : read_metrics(async + "/metrics.jsonl")) {
    if (rec.contains("checkpoint")) {
      ++saves;
      EXPECT_TRUE(rec["checkpoint"].value("async", false));
      EXPECT_GE(rec["checkpoint"]["copy_ms"].get<double>(), 0);
    }
    if (rec.contains("checkpoint_written")) {
      ++written;
      EXPECT_GT(rec["checkpoint_written"]["bytes"].get<int64_t>(), 0);
    }
  }
  EXPECT_EQ(saves, 4);
  EXPECT_EQ(written, 3);  // the last one is waited for at the end of the run
  EXPECT_EQ(read_file(async + "/checkpoints/latest"), "step-00000020\n");

  // Rank 1 dies halfway through writing step 10 in the background.
  const std::string dir = temp_dir("fail-async-kill");
  auto r = run(
      "env STRATA_FAULT=kill-in-write:1:10 " + train_command(dir, kRun + "--checkpoint.async=true"),
      120);
  ASSERT_NE(r.status, 0) << r.output;
  EXPECT_EQ(read_file(dir + "/checkpoints/latest"), "step-00000005\n") << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoints/step-00000010/meta.json"));
  // Resumed by hand from `latest`: steps 6-20 are the reference's.
  r = run(train_command(dir, kRun + "--checkpoint.async=true --checkpoint.resume=latest"), 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("at step 5"), std::string::npos) << r.output;
  EXPECT_EQ(losses_by_step(dir), reference());
}

TEST(Failures, FourRankResumeContinuesBitForBit) {
  // At dp >= 3 the bucket layout decides the last bits of the averaged gradients; the
  // checkpoint keeps the order DDP learned (Note [bucket order in checkpoints]).
  const std::string args =
      "--nproc 4 --training.steps=12 --training.batch_size=8 --model.dropout=0 "
      "--model.seq_len=64 --checkpoint.interval=6 ";
  const std::string ref = train_ok("fail-dp4-ref", args);
  const std::string res =
      train_ok("fail-dp4-res", args + "--checkpoint.resume=" + ref + "/checkpoints/step-00000006");
  const auto want = read_losses(ref + "/metrics.jsonl");
  const auto got = read_losses(res + "/metrics.jsonl");
  ASSERT_EQ(want.size(), 12u);
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(got[i], want[6 + i]) << "step " << 7 + i;
}
