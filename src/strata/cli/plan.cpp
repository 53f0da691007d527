#include "strata/cli/plan.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "strata/cli/estimate.h"
#include "strata/cli/measure.h"
#include "strata/core/config.h"
#include "strata/core/errors.h"
#include "strata/core/stats.h"
#include "strata/memory/category.h"
#include "strata/plan/cost_model.h"
#include "strata/plan/estimator.h"
#include "strata/plan/layouts.h"
#include "strata/plan/measured_parts.h"
#include "strata/plan/plan.h"
#include "strata/plan/reference_fit.h"
#include "strata/train/data/source.h"

namespace strata {

namespace {
struct Ranked {
  Layout layout;
  StepPrediction p;
  double peak = 0;
  ModelStateBytes states;                        // per rank, on the device
  std::array<double, kNumCategories> at_peak{};  // each category at the predicted peak
  double measured_s = 0;  // --run-top: the median step of a short run (0: not run)
};

// Note [the machine now]: a CPU profile is one moment of a machine whose speed moves
// (Note [calibration drift]): in chain c22 every bench row ran slower than the
// calibration just before it had measured (the drift anchor, the reference layout run
// through the rows, at 1.02-1.10x the profile's time when each row began and up to
// 1.23x within them), and every row's errors leaned under: medians of 6.0-12.2%, three
// rows over the 10% bound. Multiplied by the first anchor's factor, the same rows' medians
// came to 3.3-6.0%. So on a calibrated CPU profile `strata plan` runs the calibration's
// reference itself before pricing (the debug GPT, data parallel over the planned ranks,
// micro-batch 4, two a step: 8 steps, twice, the fastest run's median as calibrate
// takes it) and multiplies every predicted term by its step over the profile's
// prediction for it (speed_now), shrunk toward the profile by the share of a reading
// that the runs after it keep (Note [the machine now, shrunk]; in c33 the reading was
// 1.15-1.34x at three rows' start, the rows ran at a median 1.09-1.15x, and the whole
// reading pushed every row over by 12-16%). That is about 5-10 s here; a world past the profile's
// largest reference, or threads per rank other than its own, keeps the profile as it is.
// A world inside the range that calibrate skipped (Note [calibrated worlds]) is anchored
// the same way: its interpolated prediction is what the factor corrects.
// Note [the machine's collectives now]: the machine's collectives move apart from its
// compute, and the speed now (a data-parallel step, mostly compute) does not carry
// them. The layouts of a tp group as large as the world, priced by the world's fits as
// calibrated, came out 5-37% under in chain c34 (c32's profile, whose 2-rank
// all-reduce fit took 1.13 ms, where the speed now read 1.37x) and 17-45% over in c35
// (a fresh profile whose fit took 2.31 ms, the speed now 1.17x), each consistently
// over the row's two passes 5 minutes apart, while the same layouts ran within 10% in
// c33. So beside the speed now plan runs the debug GPT with tp over the whole world at
// micro-batch 1 (four a step: mostly its blocks' all-reduces), twice, and takes its
// fastest run's tp collectives (the run's own comm timers) over what the profile
// prices for them: that reading's share that lasts (speed_to_apply, as for the speed)
// is the factor the world's collectives (all-reduce, all-gather, reduce-scatter over
// every rank: tp = world, dp = world under DDP or ZeRO) take instead of the speed's,
// on their latency only (Note [the world's latency now]).
// A pair's collectives inside a larger world keep the loaded fits and their factors;
// send/recv keeps the speed's. About 5 s more at 2 ranks here, 13 s at 4.
// Chains c31-c32 had probed the world's collectives at plan time with calibrate's
// protocol (each op alone, 64 KiB) and scaled their latency by the whole probe, which
// read 1.2-1.5x while the tp=4 layouts then ran at the calibration's speed; this reads
// a training run's own timers and applies the reading's lasting share. Re-scored on
// the same runs with the world's collectives at the speed's factor instead (the
// predictions' ratio under --no-measure --machine-now): on a fresh profile (c36, six
// rows) the reading came out 0.83-0.84x at 2 ranks and 0.94-1.01x at 4, and the rows'
// mean median |error| 8.3% against 8.4%; on c35's profile, hours old (c36s, the three
// 2-rank rows), it read 0.59-0.67x and took the rows from 14.1% / 31.3%, 15.1% / 35.2%
// and 6.4% / 22.7% (median / max) to 4.8% / 15.1%, 10.4% / 27.3% and 9.7% / 24.6%.
struct MachineNow {
  double speed = 1.0;        // every term of a step
  double collectives = 1.0;  // the world's collectives, in place of `speed`
};

MachineNow machine_now(const HardwareProfile& hw, int64_t nproc, int64_t threads,
                       const std::string& self_exe) {
  if (self_exe.empty() || hw.device != "cpu" || hw.step_scale.empty() ||
      nproc > hw.step_scale.rbegin()->first || !profile_threads_mismatch(hw, threads).empty())
    return {};
  auto t0 = std::chrono::steady_clock::now();
  auto seconds_since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const ReferenceRun ref{nproc, 1, kReferenceMicroBatch, 2};
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) runs.push_back(reference_steps(ref, threads, self_exe).step_s);
  const double fastest = fastest_run(runs);
  const double predicted = predict_reference(ref, CostOptions{}, hw).step_s;
  const double reading = speed_now(fastest, predicted);
  MachineNow now;
  now.speed = speed_to_apply(reading);
  now.collectives = now.speed;
  std::fprintf(stderr,
               "strata plan: the machine now: the calibration's reference (the debug GPT, "
               "dp=%lld) ran %.1f ms a step where the profile prices %.1f (%.2fx), so every "
               "prediction takes %.2fx, the share of a reading that lasts (%.1f s; "
               "--no-measure skips)\n",
               static_cast<long long>(nproc), fastest * 1e3, predicted * 1e3, reading, now.speed,
               seconds_since());
  const ReferenceRun cref = world_collective_reference(nproc);
  const auto fits = hw.collectives.find("all_reduce");
  if (cref.ranks == 0 || fits == hw.collectives.end() || !fits->second.count(nproc)) return now;
  t0 = std::chrono::steady_clock::now();
  std::vector<MeasuredSteps> cruns;
  for (int run = 0; run < 2; ++run) cruns.push_back(reference_steps(cref, threads, self_exe));
  // One tp timer per step, and a measured run logs steps (measured_steps checks).
  const double comm = median(fastest_measured(cruns).tp_comm_s);
  const double priced = predict_reference(cref, CostOptions{}, hw).tp_comm_s;
  const double creading = speed_now(comm, priced);
  now.collectives = speed_to_apply(creading);
  std::fprintf(stderr,
               "strata plan: the machine's collectives now: the debug GPT at tp=%lld, "
               "micro-batch 1, spent %.1f ms a step in its tp collectives where the profile "
               "prices %.1f (%.2fx), so the world's collectives take %.2fx (%.1f s)\n",
               static_cast<long long>(nproc), comm * 1e3, priced * 1e3, creading, now.collectives,
               seconds_since());
  return now;
}

// --machine-now F[,C]: the factors an earlier plan's machine-now lines printed (C: F if
// left out), in place of the runs.
MachineNow parse_machine_now(const std::string& text) {
  const std::string fix =
      c10::str("--machine-now ", text, " must be SPEED or SPEED,COLLECTIVES, each within ",
               kLeastSpeed, "-", kMostSpeed,
               "; give the factors an earlier strata plan printed, e.g. "
               "--machine-now 1.08,0.77");
  auto factor = [&](const std::string& part) {
    double f = 0;
    const size_t used = leading_number(part, f);
    STRATA_CHECK(used > 0 && used == part.size() && f >= kLeastSpeed && f <= kMostSpeed, fix);
    return f;
  };
  const size_t comma = text.find(',');
  MachineNow now;
  now.speed = factor(text.substr(0, comma));
  now.collectives = comma == std::string::npos ? now.speed : factor(text.substr(comma + 1));
  return now;
}
}  // namespace

int run_plan(const PlanArgs& a, const std::string& self_exe) {
  STRATA_CHECK(a.nproc >= 1, "strata plan needs --nproc N, the ranks to plan for (at least 1)");
  STRATA_CHECK(a.top >= 1, "--top ", a.top, " must be at least 1");
  STRATA_CHECK(a.run_top >= 0, "--run-top ", a.run_top, " must be 0 (no runs) or more");
  STRATA_CHECK(a.run_top == 0 || a.run_steps > 3, "--run-steps ", a.run_steps,
               " must exceed the 3 warm-up steps");
  Config cfg;
  apply_config_args(cfg, a.config_path, a.overrides, "plan");
  validate_config(cfg);
  const int64_t threads = threads_per_rank(cfg.training.threads, a.nproc);
  const std::string path = a.profile.empty() ? default_profile_path(threads) : a.profile;
  STRATA_CHECK(std::filesystem::exists(path), "no hardware profile at ", path,
               a.profile.empty() ? c10::str("; run strata calibrate --nproc ", a.nproc,
                                            " first, or give --profile FILE (e.g. "
                                            "profiles/a100-80gb.json)")
                                 : std::string());
  const HardwareProfile hw = load_profile(path);
  if (const std::string why = profile_threads_mismatch(hw, threads); !why.empty())
    std::fprintf(stderr, "strata plan: warning: %s\n", why.c_str());
  const double limit = !a.device_memory.empty() ? static_cast<double>(parse_size(a.device_memory))
                                                : hw.device_memory_bytes;
  const DataShape shape = open_data_source(cfg).shape;
  const std::vector<Layout> layouts = enumerate_layouts(cfg, a.nproc, shape, a.fix);
  STRATA_CHECK(!layouts.empty(), "no layout of ", a.nproc, " ranks runs this model at batch ",
               cfg.training.batch_size, "; change training.batch_size or --nproc");
  CostOptions o = cost_options(cfg, hw);
  const ModelSpec spec = [&] {
    Config c = cfg;
    layouts.front().apply(c);
    return plan_run(c, a.nproc, shape).spec;
  }();
  std::set<int64_t> sizes;
  for (const Layout& l : layouts) sizes.insert(l.micro_batch);
  const std::vector<int64_t> mbs(sizes.begin(), sizes.end());
  const auto t0 = std::chrono::steady_clock::now();
  if (const auto timed = a.no_measure ? std::nullopt : time_parts_into(o, spec, mbs, hw)) {
    const MeasuredParts& parts = *timed;
    std::string line;
    for (const auto& [mb, k] : o.part_scale) {
      if (mb > parts.largest_timed) break;
      char buf[96];
      std::snprintf(buf, sizeof(buf), " %lld: %.2f/%.2f/%.2f;", static_cast<long long>(mb), k.block,
                    k.first, k.last);
      line += buf;
    }
    if (parts.largest_timed == 0)
      std::fprintf(stderr,
                   "strata plan: the model's parts are too large to time here; priced from "
                   "the profile alone\n");
    else
      std::fprintf(stderr,
                   "strata plan: timed the model's parts here (%.1f s; --no-measure skips); "
                   "block/embedding/head against the kernels' sum, over the reference's, by "
                   "micro-batch:%s%s\n",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   line.substr(0, line.size() - 1).c_str(),
                   parts.largest_timed < mbs.back()
                       ? c10::str(" (larger ones take ", parts.largest_timed, "'s)").c_str()
                       : "");
  }
  const MachineNow now = !a.machine_now.empty() ? parse_machine_now(a.machine_now)
                         : a.no_measure         ? MachineNow{}
                                                : machine_now(hw, a.nproc, threads, self_exe);
  o.speed = now.speed;
  // The world's collectives take their own factor in place of the speed's (Note [the
  // machine's collectives now]); predictions multiply every term by the speed after.
  const HardwareProfile priced =
      with_world_collectives_scaled(hw, a.nproc, now.collectives / now.speed);
  std::vector<Ranked> ranked;
  for (const Layout& l : layouts) {
    Config c = cfg;
    l.apply(c);
    const RunPlan plan = plan_run(c, a.nproc, shape);
    // The memory of the profile's device, not this machine's.
    const MemoryEstimate mem = estimate_memory(estimate_input(c, plan, hw.device));
    const double peak = mem.peak.total();
    if (limit > 0 && !fit_verdict(peak, limit).fits) continue;
    ranked.push_back({l, predict_step(plan.spec, l, o, priced), peak, mem.states, mem.peak.bytes});
  }
  STRATA_CHECK(!ranked.empty(), "none of the ", layouts.size(), " layouts of ", a.nproc,
               " ranks fits ", limit / (1 << 20), " MiB per device with the estimator's ",
               kFitMargin * 100, "% margin; use more ranks, a smaller batch or more memory");
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& x, const Ranked& y) { return x.p.step_s < y.p.step_s; });
  size_t shown = std::min<size_t>(static_cast<size_t>(a.top), ranked.size());
  if (a.run_top > 0) {
    // Note [run-top]: the first K predicted are trained for a few steps each, as the
    // user would run them (their config and overrides, the layout's keys), and ranked
    // by the measured median step: the prediction picks the candidates, measurement
    // the winner. Costs K short runs.
    const size_t k = std::min<size_t>(static_cast<size_t>(a.run_top), ranked.size());
    std::vector<std::string> base;
    if (!a.config_path.empty()) base = {"--config", a.config_path};
    base.insert(base.end(), a.overrides.begin(), a.overrides.end());
    for (size_t i = 0; i < k; ++i) {
      std::vector<std::string> args = base;
      for (const auto& o2 : ranked[i].layout.overrides()) args.push_back(o2);
      std::fprintf(stderr, "strata plan: running %zu/%zu: %s\n", i + 1, k,
                   ranked[i].layout.to_string().c_str());
      ranked[i].measured_s = measured_step_seconds(self_exe, a.nproc, args, a.run_steps, 3);
    }
    std::stable_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k),
                     [](const Ranked& x, const Ranked& y) { return x.measured_s < y.measured_s; });
    shown = std::max(shown, k);
  }
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < shown; ++i) {
      const auto& r = ranked[i];
      nlohmann::json memory = {{"model_states", r.states.total()},
                               {"host_optimizer", r.states.host_optimizer}};
      for (size_t k = 0; k < kNumCategories; ++k)
        memory[category_name(static_cast<Category>(k))] = r.at_peak[k];
      out.push_back({{"layout", r.layout.to_string()},
                     {"overrides", r.layout.overrides()},
                     {"step_s", r.p.step_s},
                     {"tokens_per_s", r.p.tokens_per_s},
                     {"mfu", r.p.mfu},
                     {"peak_bytes", r.peak},
                     {"memory", memory},
                     {"compute_s", r.p.compute_s},
                     {"recompute_s", r.p.recompute_s},
                     {"tp_comm_s", r.p.tp_comm_s},
                     {"bubble_s", r.p.bubble_s},
                     {"dp_exposed_s", r.p.dp_exposed_s},
                     {"optimizer_s", r.p.optimizer_s},
                     {"offload_s", r.p.offload_s},
                     {"measured_step_s", r.measured_s}});
    }
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf("strata plan: %s on %lld ranks, batch %lld, %s; profile %s\n", spec.flavour.c_str(),
              static_cast<long long>(a.nproc), static_cast<long long>(cfg.training.batch_size),
              cfg.memory.precision.c_str(), hw.name.c_str());
  std::printf(
      "%zu layouts start, %zu fit%s; the %zu fastest predicted%s:\n", layouts.size(), ranked.size(),
      limit > 0 ? c10::str(" ", limit / (1 << 20), " MiB").c_str() : " (no memory limit)", shown,
      a.run_top > 0 ? c10::str(", the first ", std::min<size_t>(a.run_top, ranked.size()),
                               " run and ranked by their measured step")
                          .c_str()
                    : "");
  std::printf("%3s %9s%s %10s %6s %9s %8s %8s %8s %8s %8s %8s  %s\n", "#", "step ms",
              a.run_top > 0 ? "  measured" : "", "tokens/s", "MFU", "peak MiB", "compute", "recomp",
              "tp comm", "bubble", "dp comm", "optim", "layout");
  for (size_t i = 0; i < shown; ++i) {
    const auto& r = ranked[i];
    char m[32] = "";  // the measured column: a run's step, blank for layouts not run
    if (a.run_top > 0 && r.measured_s > 0)
      std::snprintf(m, sizeof(m), " %9.2f", r.measured_s * 1e3);
    if (a.run_top > 0 && r.measured_s == 0) std::snprintf(m, sizeof(m), " %9s", "");
    std::printf("%3zu %9.2f%s %10.0f %5.1f%% %9.1f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f  %s\n",
                i + 1, r.p.step_s * 1e3, m, r.p.tokens_per_s, r.p.mfu * 100, r.peak / (1 << 20),
                r.p.compute_s * 1e3, r.p.recompute_s * 1e3, r.p.tp_comm_s * 1e3, r.p.bubble_s * 1e3,
                r.p.dp_exposed_s * 1e3, r.p.optimizer_s * 1e3, r.layout.to_string().c_str());
  }
  std::string run;
  for (const auto& o2 : ranked.front().layout.overrides()) run += " " + o2;
  std::printf("run the first:%s\n", run.c_str());
  return 0;
}

}  // namespace strata
