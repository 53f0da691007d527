// Pipeline schedules as data (parallel/pipeline/schedule): the degenerate one-stage
// schedule and the invariants check_schedule enforces on any schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>

#include "strata/core/errors.h"
#include "strata/parallel/pipeline/partition.h"
#include "strata/parallel/pipeline/schedule.h"
#include "strata/parallel/pipeline/simulate.h"
#include "test_util.h"

using namespace strata;

TEST(Schedule, SingleStageAlternatesForwardAndBackward) {
  const auto s = single_stage_schedule(3);
  ASSERT_EQ(s.size(), 1u);
  std::string text;
  for (const auto& a : s[0]) text += a.to_string() + " ";
  EXPECT_EQ(text, "0F0 0B0 0F1 0B1 0F2 0B2 ");
  const ScheduleCheck c = check_schedule(s, 3);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.max_in_flight, 1);  // one micro-batch's activations at a time
}

TEST(Schedule, CheckFindsBrokenSchedules) {
  using A = Action;
  const auto F = ActionType::kForward, B = ActionType::kBackward;
  EXPECT_NE(check_schedule({{A{B, 0}, A{F, 0}}}, 1).error.find("0B0 comes before its forward"),
            std::string::npos);
  EXPECT_NE(check_schedule({{A{F, 0}, A{F, 0}}}, 1).error.find("second forward"),
            std::string::npos);
  EXPECT_NE(check_schedule({{A{F, 0}, A{B, 0}}}, 2).error.find("0B1 never runs"),
            std::string::npos);
  EXPECT_NE(check_schedule({{A{F, 2}}}, 2).error.find("names no micro-batch"), std::string::npos);
  // GPipe-style: all forwards, then all backwards: valid, everything in flight.
  const ScheduleCheck g =
      check_schedule({{A{F, 0}, A{F, 1}, A{F, 2}, A{B, 2}, A{B, 1}, A{B, 0}}}, 3);
  EXPECT_EQ(g.error, "");
  EXPECT_EQ(g.max_in_flight, 3);
}

namespace {
std::string line(const StageActions& actions, bool compute_only = true) {
  std::string s;
  for (const Action& a : actions)
    if (!compute_only || a.is_compute()) s += (s.empty() ? "" : " ") + a.to_string();
  return s;
}
}  // namespace

TEST(PipelineSchedule, ListsOfTheKnownSchedules) {
  // p=2, m=4: GPipe and 1F1B by hand; rank 0 of 1F1B warms up with p-1 forwards.
  auto g = pipeline_schedule(ScheduleKind::kGpipe, 2, 4);
  EXPECT_EQ(line(g[0]), "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3");
  auto f = pipeline_schedule(ScheduleKind::k1F1B, 2, 4);
  EXPECT_EQ(line(f[0]), "0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3");
  EXPECT_EQ(line(f[1]), "0F0 0B0 0F1 0B1 0F2 0B2 0F3 0B3");
  // With its messages: rank 0 sends activations and receives gradients.
  EXPECT_EQ(line(f[0], false).substr(0, 27), "0F0 0sF0 0F1 0sF1 0rB0 0B0 ");
  EXPECT_EQ(line(f[1], false).substr(0, 16), "0rF0 0F0 0B0 0sB");
  // Interleaved, p=2, v=2, m=4: groups of 2 micro-batches through chunk 0 then 1;
  // rank 0 warms up with 2(p-1) + (v-1)p = 4 forwards.
  auto i = pipeline_schedule(ScheduleKind::kInterleaved, 2, 4, 2);
  EXPECT_EQ(line(i[0]), "0F0 0F1 1F0 1F1 0F2 1B0 0F3 1B1 1F2 0B0 1F3 0B1 1B2 1B3 0B2 0B3");
  // zb-h1, p=4, m=8: the last stage defers its W's by p-1 positions and runs them in
  // the cool-down, where 1F1B's stages wait; the first runs F, I, W in turn.
  auto z = pipeline_schedule(ScheduleKind::kZbH1, 4, 8);
  EXPECT_EQ(line(z[3]),
            "0F0 0I0 0F1 0I1 0F2 0I2 0F3 0I3 0W0 0F4 0I4 0W1 0F5 0I5 0W2 0F6 0I6 0W3 0F7 0I7 "
            "0W4 0W5 0W6 0W7");
  EXPECT_EQ(line(z[0]),
            "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 "
            "0I6 0W6 0I7 0W7");
}

TEST(PipelineSchedule, EveryScheduleIsValidDeadlockFreeAndHasItsTheoreticalBubble) {
  // For p in {2,3,4,8}, m in {p, 2p, 3p+1}, v in {1,2} (interleaved; v=2 needs m a
  // multiple of p): every micro-batch forwarded and backwarded once per chunk, messages
  // matched in order (check_schedule), the unit-cost simulation completes, and the
  // bubble is the theory's: (p-1)/(m+p-1) of the step for GPipe and 1F1B (F=1, B=2);
  // interleaved divides the idle time by v; zb-h1 (F=I=W=1) has a third of 1F1B's.
  // Activations in flight: m for GPipe, p-r on rank r for 1F1B, at most p (rank 0's
  // 1F1B peak) on every rank for zb-h1.
  for (int64_t p : {2, 3, 4, 8})
    for (int64_t m : {p, 2 * p, 3 * p + 1}) {
      const std::string at = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      double idle_1f1b = 0;
      for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
        const auto s = pipeline_schedule(kind, p, m);
        const ScheduleCheck c = check_schedule(s, m);
        ASSERT_EQ(c.error, "") << schedule_name(kind) << " " << at;
        const Simulation sim = simulate_schedule(s, unit_costs());
        ASSERT_EQ(sim.error, "") << schedule_name(kind) << " " << at;
        const double idle = sim.step_time - sim.busy[0];
        if (kind == ScheduleKind::kZbH1) {
          EXPECT_NEAR(idle, idle_1f1b / 3, 1e-9) << at;
          EXPECT_NEAR(sim.busy[0], 3.0 * static_cast<double>(m), 1e-9);
        } else {
          const double theory = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
          EXPECT_NEAR(sim.bubble_fraction, theory, 1e-9) << schedule_name(kind) << " " << at;
        }
        if (kind == ScheduleKind::k1F1B) idle_1f1b = idle;
        for (int64_t r = 0; r < p; ++r) {
          const int64_t held = c.in_flight[static_cast<size_t>(r)];
          if (kind == ScheduleKind::kZbH1)
            EXPECT_LE(held, r == 0 ? std::min(m, p) : p) << at << " rank " << r;
          else
            EXPECT_EQ(held, kind == ScheduleKind::kGpipe ? m : std::min(m, p - r))
                << schedule_name(kind) << " " << at << " rank " << r;
        }
        if (kind == ScheduleKind::kZbH1) EXPECT_EQ(c.in_flight[0], std::min(m, p)) << at;
        // What each compute action holds beside its own micro-batch (Note [zb-h1
        // memory]): 1F1B and GPipe hold whole micro-batches only, up to in_flight - 1;
        // zb-h1's last rank runs each I right after its F, so it holds only micro-batches
        // awaiting their W beside it.
        for (int64_t r = 0; r < p; ++r) {
          const auto& beside = c.beside[static_cast<size_t>(r)];
          ASSERT_FALSE(beside.empty()) << at;
          int64_t most = 0;
          for (const HeldBeside& h : beside) {
            most = std::max(most, h.forwarded + h.awaiting_weight);
            if (kind != ScheduleKind::kZbH1) EXPECT_EQ(h.awaiting_weight, 0) << at;
            if (kind == ScheduleKind::kZbH1 && r == p - 1)
              EXPECT_EQ(h.forwarded, 0) << at << " awaiting " << h.awaiting_weight;
          }
          EXPECT_EQ(most, c.in_flight[static_cast<size_t>(r)] - 1)
              << schedule_name(kind) << " " << at << " rank " << r;
        }
      }
      for (int64_t v : {1, 2}) {
        if (v > 1 && m % p != 0) {
          EXPECT_THROW(pipeline_schedule(ScheduleKind::kInterleaved, p, m, v), Error) << at;
          continue;
        }
        const auto s = pipeline_schedule(ScheduleKind::kInterleaved, p, m, v);
        const ScheduleCheck c = check_schedule(s, m, v);
        ASSERT_EQ(c.error, "") << "interleaved v=" << v << " " << at;
        // What it holds beside each action, per chunk (Note [interleaved memory]): the
        // chunks' counts sum to the whole, and the most held at once is in_flight - 1.
        for (int64_t r = 0; r < p; ++r) {
          int64_t most = 0;
          for (const HeldBeside& h : c.beside[static_cast<size_t>(r)]) {
            ASSERT_EQ(static_cast<int64_t>(h.forwarded_by_chunk.size()), v) << at;
            int64_t sum = 0;
            for (const int64_t n : h.forwarded_by_chunk) {
              EXPECT_GE(n, 0) << at;
              sum += n;
            }
            EXPECT_EQ(sum, h.forwarded) << at;
            most = std::max(most, h.forwarded);
          }
          EXPECT_EQ(most, c.in_flight[static_cast<size_t>(r)] - 1) << "v=" << v << " " << at;
        }
        const Simulation sim = simulate_schedule(s, unit_costs(v));
        ASSERT_EQ(sim.error, "") << "interleaved v=" << v << " " << at;
        const double idle = sim.step_time - sim.busy[0];
        EXPECT_NEAR(idle, idle_1f1b / static_cast<double>(v), 1e-9)
            << "interleaved v=" << v << " " << at;
      }
    }
}

TEST(PipelineSchedule, SentGradientsAreReleasedOnlyOnceTheNeighbourHasThem) {
  // Note [sent gradients released]: a gradient send is released at a forward of this
  // rank whose input the neighbour sent after its backward of that micro-batch, so the
  // wait cannot block: checked on simulated steps with unit and with uneven costs
  // (every release at or after the neighbour's backward began). Outside GPipe (whose
  // neighbour forwards nothing after its backwards) the sends outstanding at once do
  // not grow with the micro-batches: as many at m = 8p as at m = 4p.
  std::map<std::tuple<ScheduleKind, int64_t, int64_t>, int64_t> most_at_4p;
  for (ScheduleKind kind :
       {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1, ScheduleKind::kInterleaved})
    for (int64_t p : {2, 3, 4})
      for (int64_t m : {2 * p + 1, 4 * p, 8 * p}) {
        const int64_t v = kind == ScheduleKind::kInterleaved ? 2 : 1;
        if (m % p != 0 && v > 1) continue;
        const std::string at =
            schedule_name(kind) + " p=" + std::to_string(p) + " m=" + std::to_string(m);
        const auto s = pipeline_schedule(kind, p, m, v);
        const ActionCost uneven = [&](int64_t rank, const Action& a) {
          return a.is_compute() ? 0.5 + static_cast<double>((rank * 7 + a.micro * 3) % 5) : 0.0;
        };
        std::vector<Simulation> sims{simulate_schedule(s, unit_costs(v)),
                                     simulate_schedule(s, uneven)};
        for (int64_t r = 0; r < p; ++r) {
          const auto done = sent_gradients_done(s, r);
          const StageActions& list = s[static_cast<size_t>(r)];
          ASSERT_EQ(done.size(), list.size()) << at;
          const int64_t q = (r + p - 1) % p;
          int64_t outstanding = 0, most = 0, released = 0;
          for (size_t i = 0; i < list.size(); ++i) {
            if (!done[i].empty()) EXPECT_EQ(list[i].type, ActionType::kForward) << at;
            outstanding -= static_cast<int64_t>(done[i].size());
            released += static_cast<int64_t>(done[i].size());
            EXPECT_GE(outstanding, 0) << at << " rank " << r << ": released before sent";
            if (list[i].type == ActionType::kSendGrad) most = std::max(most, ++outstanding);
            for (const auto& [chunk, micro] : done[i]) {
              const int64_t their_chunk = (chunk * p + r - 1) / p;
              for (const Simulation& sim : sims) {
                ASSERT_EQ(sim.error, "") << at;
                double backward_start = -1, forward_start = -1;
                for (const TimedAction& t : sim.timeline[static_cast<size_t>(q)])
                  if (t.action.is_compute() && t.action.type != ActionType::kForward &&
                      t.action.type != ActionType::kBackwardWeight && t.action.micro == micro &&
                      t.action.chunk == their_chunk)
                    backward_start = t.start;
                for (const TimedAction& t : sim.timeline[static_cast<size_t>(r)])
                  if (t.action == list[i]) forward_start = t.start;
                ASSERT_GE(backward_start, 0) << at;
                EXPECT_GE(forward_start, backward_start)
                    << at << " rank " << r << " gradient " << micro;
              }
            }
          }
          if (kind == ScheduleKind::kGpipe || (r == 0 && v == 1)) {
            EXPECT_EQ(released, 0) << at << " rank " << r;
          } else {
            EXPECT_GT(released, 0) << at << " rank " << r;
            if (m == 4 * p) most_at_4p[{kind, p, r}] = most;
            if (m == 8 * p) EXPECT_EQ(most, (most_at_4p[{kind, p, r}])) << at << " rank " << r;
          }
        }
      }
}

TEST(PipelineSchedule, CheckAndSimulationFindBrokenMessaging) {
  auto s = pipeline_schedule(ScheduleKind::k1F1B, 2, 2);
  // Rank 1 receives micro-batch 1 before 0: matched out of order.
  auto swapped = s;
  for (Action& a : swapped[1])
    if (a.type == ActionType::kRecvActivation) a.micro = 1 - a.micro;
  EXPECT_NE(check_schedule(swapped, 2).error.find("runs before its input is received"),
            std::string::npos);
  // Rank 0 waits for the gradient of micro-batch 0 before sending its activations:
  // each waits for the other.
  auto cyclic = s;
  cyclic[0] = {{ActionType::kForward, 0, 0},
               {ActionType::kRecvGrad, 0, 0},
               {ActionType::kSendActivation, 0, 0}};
  const Simulation sim = simulate_schedule(cyclic, unit_costs());
  EXPECT_NE(sim.error.find("deadlock"), std::string::npos) << sim.error;
  // A send with no neighbour.
  auto lonely = s;
  lonely[1].push_back({ActionType::kSendActivation, 0, 0});
  EXPECT_NE(check_schedule(lonely, 2).error.find("has no neighbour"), std::string::npos);
  // One clear line for what a schedule cannot run.
  EXPECT_THROW(pipeline_schedule(ScheduleKind::k1F1B, 4, 3), Error);
  EXPECT_THROW(pipeline_schedule(ScheduleKind::k1F1B, 2, 4, 2), Error);
  EXPECT_THROW(parse_schedule_kind("1F1B-interleaved"), Error);
  try {
    pipeline_schedule(ScheduleKind::k1F1B, 4, 3);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs at least pp=4 micro-batches per step (got 3)"),
              std::string::npos)
        << e.what();
  }
}

TEST(PipelineSchedule, SharedMachineSimulationSlowsWhatComputesAtOnce) {
  // Note [shared-machine simulation]. Forward 1, backward 2, free messages.
  const ActionCost unit = unit_costs();
  const ActionWorkFn work = [&](int64_t r, const Action& a) { return ActionWork{unit(r, a), 0}; };
  // With no slowdown it is simulate_schedule, action by action.
  for (const auto kind : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    const auto s = pipeline_schedule(kind, 4, 8);
    const Simulation a = simulate_schedule(s, unit);
    const Simulation b = simulate_shared(s, work, [](double) { return 1.0; });
    ASSERT_EQ(b.error, "");
    EXPECT_NEAR(a.step_time, b.step_time, 1e-9);
    for (size_t r = 0; r < s.size(); ++r) {
      ASSERT_EQ(a.timeline[r].size(), b.timeline[r].size());
      for (size_t i = 0; i < a.timeline[r].size(); ++i)
        EXPECT_NEAR(a.timeline[r][i].end, b.timeline[r][i].end, 1e-9) << r << " " << i;
    }
  }
  // k ranks computing at once each run at 1/k (one core). GPipe, 2 stages, 2
  // micro-batches: F alone [0,1], two forwards together [1,3], F alone [3,4], B alone
  // [4,6], two backwards together [6,10], B alone [10,12]: 12, not the 9 of two machines.
  const auto g = pipeline_schedule(ScheduleKind::kGpipe, 2, 2);
  const Simulation one_core = simulate_shared(g, work, [](double k) { return k; });
  EXPECT_NEAR(one_core.step_time, 12, 1e-9);
  EXPECT_NEAR(simulate_schedule(g, unit).step_time, 9, 1e-9);
  // A fixed part (a message's transfer) is not slowed, and a rank in it does not count.
  const ActionWorkFn with_sends = [&](int64_t r, const Action& a) {
    return ActionWork{unit(r, a), a.is_send() ? 0.5 : 0};
  };
  // The four messages lie on the path: each adds its 0.5 at full speed, and the
  // computing ranks' pairs stay as they were (14); two machines would take 9 + 2.
  const Simulation sends = simulate_shared(g, with_sends, [](double k) { return k; });
  EXPECT_NEAR(sends.step_time, 14, 1e-9);
  const Simulation apart = simulate_schedule(g, [&](int64_t r, const Action& a) {
    return with_sends(r, a).compute + with_sends(r, a).fixed;
  });
  EXPECT_NEAR(apart.step_time, 11, 1e-9);
  // A deadlock is found as simulate_schedule finds it.
  auto cyclic = pipeline_schedule(ScheduleKind::k1F1B, 2, 2);
  cyclic[0] = {{ActionType::kForward, 0, 0},
               {ActionType::kRecvGrad, 0, 0},
               {ActionType::kSendActivation, 0, 0}};
  EXPECT_NE(simulate_shared(cyclic, work, [](double k) { return k; }).error.find("deadlock"),
            std::string::npos);
}

TEST(StagePartition, BalancedMinimisesTheSlowestStage) {
  EXPECT_EQ(uniform_partition(7, 3), (std::vector<int64_t>{3, 2, 2}));
  StageCosts even;
  even.block.assign(8, 1.0);
  EXPECT_EQ(balanced_partition(even, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  // A heavy head (GPT-2's 50257-token vocabulary against 4 small blocks) moves blocks to
  // the first stage; a heavy embedding the other way.
  StageCosts head;
  head.block.assign(4, 1.0);
  head.last = 2;
  EXPECT_EQ(balanced_partition(head, 2), (std::vector<int64_t>{3, 1}));
  EXPECT_DOUBLE_EQ(slowest_stage(head, {3, 1}), 3);
  EXPECT_DOUBLE_EQ(slowest_stage(head, {2, 2}), 4);
  StageCosts embedding = head;
  embedding.last = 0;
  embedding.first = 2;
  EXPECT_EQ(balanced_partition(embedding, 2), (std::vector<int64_t>{1, 3}));
  // Memory: stage 0 holds 2 micro-batches (1F1B at p=2), so with a cap of 4 block-bytes
  // it takes at most 2 blocks even though 3 would balance the time better.
  StageCosts capped = head;
  capped.block_bytes.assign(4, 1.0);
  capped.in_flight = {2, 1};
  capped.capacity = {4, 10};
  EXPECT_EQ(balanced_partition(capped, 2), (std::vector<int64_t>{2, 2}));
  capped.capacity = {1, 1};
  EXPECT_THROW(balanced_partition(capped, 2), Error);
  EXPECT_THROW(balanced_partition(head, 5), Error);  // fewer blocks than stages
}

TEST(StagePartition, HeavyHeadOfAGpt2VocabularyMovesABlockToTheFirstStage) {
  // GPT-2's 50257-token vocabulary (50304 padded) over 4 gpt2-124m blocks at context
  // 1024: the head and loss cost about 4.5 blocks, so two stages balance as 3 + 1
  // blocks; uniform's 2 + 2 makes the last stage 18% slower.
  ModelConfig mc;
  mc.flavour = "gpt2-124m";
  mc.n_layer = 4;
  const ModelSpec spec = resolve_model_spec(mc, {});
  const StageCosts c = transformer_stage_costs(spec);
  ASSERT_EQ(c.block.size(), 4u);
  EXPECT_NEAR(c.last / c.block[0], 4.47, 0.01);
  const auto best = balanced_partition(c, 2);
  EXPECT_EQ(best, (std::vector<int64_t>{3, 1}));
  EXPECT_NEAR(slowest_stage(c, uniform_partition(4, 2)) / slowest_stage(c, best), 1.18, 0.01);
  mc.flavour = "resnet-18";
  EXPECT_THROW(transformer_stage_costs(resolve_model_spec(mc, {0, 28, 1, 10})), Error);
}

TEST(StagePartition, BalancedEqualsExhaustiveSearch) {
  // Every partition of up to 8 blocks into up to 4 stages, on seeded random costs: the
  // dynamic programme's slowest stage equals the best of all of them.
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>((state >> 33) % 1000) / 100.0;
  };
  for (int trial = 0; trial < 40; ++trial) {
    StageCosts c;
    const int64_t blocks = 2 + trial % 7, stages = 1 + trial % std::min<int64_t>(4, blocks);
    for (int64_t b = 0; b < blocks; ++b) c.block.push_back(next());
    c.first = next();
    c.last = 3 * next();
    double best = 1e300;
    std::vector<int64_t> part(static_cast<size_t>(stages), 1);
    std::function<void(int64_t, int64_t)> walk = [&](int64_t s, int64_t left) {
      if (s == stages - 1) {
        part[static_cast<size_t>(s)] = left;
        best = std::min(best, slowest_stage(c, part));
        return;
      }
      for (int64_t n = 1; n <= left - (stages - 1 - s); ++n) {
        part[static_cast<size_t>(s)] = n;
        walk(s + 1, left - n);
      }
    };
    walk(0, blocks);
    const auto got = balanced_partition(c, stages);
    EXPECT_DOUBLE_EQ(slowest_stage(c, got), best) << "trial " << trial;
  }
}

TEST(StagePartition, PartitionStringsAreCheckedWithTheFix) {
  EXPECT_EQ(parse_partition("5,4,3", 12, 3), (std::vector<int64_t>{5, 4, 3}));
  auto error_of = [](const std::string& text) {
    try {
      parse_partition(text, 12, 3);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("5,4").find("gives 2 stages and 9 blocks; it needs pp=3 counts summing to "
                                 "the model's 12 blocks, e.g. '4,4,4'"),
            std::string::npos)
      << error_of("5,4");
  EXPECT_NE(error_of("6,6,0").find("'0' is not a block count of at least 1"), std::string::npos);
  EXPECT_NE(error_of("6,x,6").find("'x' is not a block count"), std::string::npos);
}

TEST(PipelineSchedule, ChromeTraceHasOneEventPerComputeActionOnItsRanksTrack) {
  const auto s = pipeline_schedule(ScheduleKind::kZbH1, 2, 3);
  const Simulation sim = simulate_schedule(s, unit_costs());
  const nlohmann::json trace = chrome_trace(sim.timeline);
  int64_t events = 0, names = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      ++names;
      continue;
    }
    ++events;
    ASSERT_EQ(e["ph"], "X");
    const auto r = e["tid"].get<size_t>();
    // The event is the simulated action at that time on that rank.
    bool found = false;
    for (const TimedAction& t : sim.timeline[r])
      found |= t.action.to_string() == e["name"].get<std::string>() &&
               std::abs(t.start * 1e6 - e["ts"].get<double>()) < 1e-6 &&
               std::abs((t.end - t.start) * 1e6 - e["dur"].get<double>()) < 1e-6;
    EXPECT_TRUE(found) << e.dump();
    const std::string name = e["name"];
    EXPECT_EQ(e["cat"], name.find('F') != std::string::npos   ? "forward"
                        : name.find('I') != std::string::npos ? "backward-input"
                                                              : "backward-weight");
  }
  EXPECT_EQ(names, 2);
  EXPECT_EQ(events, 2 * 3 * 3);  // F, I and W of 3 micro-batches on 2 ranks
}

TEST(PipelineSchedule, MeasuredDurationsFromATraceReproduceTheSimulatedStep) {
  // Uneven costs (the last rank slower, W cheaper than I): the simulated timeline's
  // trace, read back, gives costs that simulate to the same step and bubble.
  const auto s = pipeline_schedule(ScheduleKind::kZbH1, 3, 4);
  auto cost = [](int64_t rank, const Action& a) {
    const double slow = rank == 2 ? 1.5 : 1.0;
    switch (a.type) {
      case ActionType::kForward:
        return 1.0 * slow;
      case ActionType::kBackwardInput:
        return 1.2 * slow;
      case ActionType::kBackwardWeight:
        return 0.7 * slow;
      default:
        return 0.0;
    }
  };
  const Simulation want = simulate_schedule(s, cost);
  const auto timelines = timelines_from_trace(chrome_trace(want.timeline));
  ASSERT_EQ(timelines.size(), 3u);
  const Simulation got = simulate_schedule(s, measured_costs(timelines));
  EXPECT_NEAR(got.step_time, want.step_time, 1e-9);
  EXPECT_NEAR(got.bubble_fraction, want.bubble_fraction, 1e-9);
  EXPECT_TRUE(std::isnan(measured_costs(timelines)(0, Action{ActionType::kForward, 9, 0})));
}

TEST(ScheduleCli, PrintsTheGridAndTheBubble) {
  auto r = test::run(test::strata_bin() + " schedule --pp 4 --microbatches 8 --schedule 1f1b");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("stage 3 |   .   .   . 0F0 0B0 0B0 0F1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bubble 27.3% of the step (theory 27.3%)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("micro-batches held at once per rank: 4, 3, 2, 1"), std::string::npos)
      << r.output;
  r = test::run(test::strata_bin() +
                " schedule --pp 4 --microbatches 8 --schedule interleaved --virtual 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(theory 15.8%)"), std::string::npos) << r.output;
  const std::string trace = test::temp_dir("schedule-trace") + "/trace.json";
  r = test::run(test::strata_bin() + " schedule --pp 2 --microbatches 2 --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(trace);
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["traceEvents"].size(), 2u + 2 * 2 * 2) << doc.dump();  // 2 names, F and B
  // Its durations (a unit drawn as 1 ms) predict the unit step: (m + p - 1) x 3 units.
  r = test::run(test::strata_bin() + " schedule --pp 2 --microbatches 2 --costs " + trace);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("predicted step 9.00 ms, bubble 33.3%"), std::string::npos) << r.output;
  test::expect_one_error_line(
      test::strata_bin() + " schedule --pp 3 --microbatches 3 --costs " + trace,
      "has no duration for stage 0's 0F2");
  test::expect_one_error_line(test::strata_bin() + " schedule --pp 4 --microbatches 3",
                              "needs at least pp=4 micro-batches per step (got 3)");
  test::expect_one_error_line(test::strata_bin() + " schedule --schedule 1F1B",
                              "unknown pipeline schedule '1F1B'");
  test::expect_one_error_line(test::strata_bin() + " schedule --microbatches 0",
                              "--microbatches=0 must be at least 1 (micro-batches)");
  test::expect_one_error_line(test::strata_bin() +
                                  " schedule --pp 3 --microbatches 7 --schedule interleaved "
                                  "--virtual 2",
                              "needs micro-batches per step (7) divisible by pp=3");
}
