#include "strata/cli/calibrate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include "strata/api/strata.h"
#include "strata/cli/measure.h"
#include "strata/cli/plan.h"
#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/distributed/launcher.h"
#include "strata/memory/process_memory.h"
#include "strata/models/flavours.h"
#include "strata/optim/adamw.h"
#include "strata/plan/cost_model.h"
#include "strata/plan/profile.h"

namespace fs = std::filesystem;

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of fn over at least `min_reps` runs and about `budget_s`, after one
// warm-up run.
template <class Fn>
double median_seconds(Fn fn, int min_reps, double budget_s) {
  fn();
  std::vector<double> t;
  const auto start = Clock::now();
  while (
      static_cast<int>(t.size()) < min_reps ||
      (std::chrono::duration<double>(Clock::now() - start).count() < budget_s && t.size() < 50)) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<GemmPoint> gemm_curve(at::ScalarType dtype, int64_t largest, bool quick) {
  std::vector<GemmPoint> out;
  for (int64_t n = 64; n <= largest; n *= quick ? 4 : 2) {
    // A transformer's shapes are (tokens x d) by (d x 4d) and the like: rectangular,
    // here (2n x n) by (n x 2n).
    const at::Tensor a = at::randn({2 * n, n}).to(dtype), b = at::randn({n, 2 * n}).to(dtype);
    const double s = median_seconds([&] { (void)at::mm(a, b); }, quick ? 2 : 3, quick ? 0.05 : 0.3);
    out.push_back({2.0 * (2 * n) * n * (2 * n), s});
  }
  return out;
}

double memory_bandwidth(bool quick) {
  const int64_t n = quick ? (4 << 20) : (32 << 20);  // floats: 16 or 128 MiB
  const at::Tensor a = at::randn({n});
  at::Tensor b = at::empty_like(a);
  const double s = median_seconds([&] { b.copy_(a); }, 3, quick ? 0.05 : 0.3);
  return 2.0 * static_cast<double>(a.nbytes()) / s;  // read + write
}

// Forward and backward of `loss_of(x)` with x's gradient: the time one call of the
// kernel costs in a training step.
template <class Fn>
double fwd_bwd_seconds(const at::Tensor& x, Fn loss_of, bool quick) {
  return median_seconds(
      [&] {
        x.mutable_grad() = at::Tensor();
        loss_of(x).backward();
      },
      quick ? 2 : 3, quick ? 0.03 : 0.15);
}

// Note [kernel calibration]: the non-GEMM kernels of a transformer step timed forward
// and backward as the model calls them, at sizes from one short sequence to a large
// micro-batch: element-wise bandwidth alone misprices them (exp and erf are
// compute-bound on CPUs; the loss's backward writes a full gradient of the logits).
std::map<std::string, std::vector<KernelPoint>> kernel_curves(bool quick) {
  std::map<std::string, std::vector<KernelPoint>> out;
  const std::vector<int64_t> rows =
      quick ? std::vector<int64_t>{64, 1024} : std::vector<int64_t>{64, 256, 1024, 4096};
  auto grad_of = [](at::Tensor t) { return t.requires_grad_(true); };
  for (const int64_t r : rows) {  // the loss over a vocabulary of 8192
    const at::Tensor x = grad_of(at::randn({r, 8192}));
    const at::Tensor target = at::randint(8192, {r}, at::kLong);
    const double s = fwd_bwd_seconds(
        x, [&](const at::Tensor& v) { return at::cross_entropy_loss(v, target); }, quick);
    out["cross_entropy"].push_back({static_cast<double>(x.numel()), s});
  }
  for (const auto& [dtype, name] :
       {std::pair{at::kFloat, "fp32"}, std::pair{at::kBFloat16, "bf16"}}) {
    for (const int64_t r : rows) {  // rows of a 384-wide stream (the MLP's 1536 for GELU)
      const at::Tensor x = grad_of(at::randn({r, 384}).to(dtype));
      const at::Tensor w = at::ones({384}, dtype), b = at::zeros({384}, dtype);
      out[std::string("layer_norm/") + name].push_back(
          {static_cast<double>(x.numel()),
           fwd_bwd_seconds(
               x, [&](const at::Tensor& v) { return at::layer_norm(v, {384}, w, b).sum(); },
               quick)});
      const at::Tensor h = grad_of(at::randn({r, 1536}).to(dtype));
      out[std::string("gelu/") + name].push_back(
          {static_cast<double>(h.numel()),
           fwd_bwd_seconds(
               h, [&](const at::Tensor& v) { return at::gelu(v).sum(); }, quick)});
    }
    // Causal attention over (1, 4 heads, T, 32) for growing T, per head; work counts
    // forward's 4 T^2 d and backward's 8 T^2 d FLOPs (the full square, as the cost
    // model does).
    for (const int64_t t :
         quick ? std::vector<int64_t>{128, 512} : std::vector<int64_t>{64, 128, 256, 512, 1024}) {
      const at::Tensor q = grad_of(at::randn({1, 4, t, 32}).to(dtype));
      const at::Tensor k = at::randn({1, 4, t, 32}).to(dtype),
                       v = at::randn({1, 4, t, 32}).to(dtype);
      const double s = fwd_bwd_seconds(
          q,
          [&](const at::Tensor& x) {
            return at::scaled_dot_product_attention(x, k, v, {}, 0.0, true).sum();
          },
          quick);
      out[std::string("attention/") + name].push_back(
          {12 * static_cast<double>(t * t) * 32, s / 4});
    }
    // A linear layer (tokens x d) -> 4d with its bias, forward and backward (input,
    // weight and bias gradients): thin transformer shapes run well below a square
    // multiply's rate. Work: its 6 N d 4d FLOPs.
    for (const auto& [n, d] :
         quick ? std::vector<std::pair<int64_t, int64_t>>{{128, 128}, {2048, 128}}
               : std::vector<std::pair<int64_t, int64_t>>{{128, 64},
                                                          {128, 128},
                                                          {512, 128},
                                                          {2048, 128},
                                                          {2048, 256},
                                                          {8192, 256},
                                                          {8192, 512}}) {
      const at::Tensor x = grad_of(at::randn({n, d}).to(dtype));
      const at::Tensor w = grad_of(at::randn({4 * d, d}).to(dtype)),
                       b = grad_of(at::zeros({4 * d}).to(dtype));
      const double s = fwd_bwd_seconds(
          x, [&](const at::Tensor& v) { return at::linear(v, w, b).sum(); }, quick);
      out[std::string("linear/") + name].push_back({6.0 * static_cast<double>(n * d * 4 * d), s});
    }
  }
  // AdamW's update of fp32 parameters, per element, over 4 tensors.
  for (const int64_t n :
       quick ? std::vector<int64_t>{1 << 16} : std::vector<int64_t>{1 << 16, 1 << 20}) {
    std::vector<NamedParam> params;
    for (int i = 0; i < 4; ++i) {
      at::Tensor w = at::randn({n / 4});
      w.mutable_grad() = at::randn({n / 4});
      params.push_back({"w" + std::to_string(i), w});
    }
    AdamW opt(params, {});
    out["adamw"].push_back(
        {static_cast<double>(n), median_seconds([&] { opt.step(1e-4); }, 3, quick ? 0.03 : 0.15)});
  }
  return out;
}

// One small op's forward and backward: a chain of multiplies on 8 floats.
double op_overhead(bool quick) {
  const at::Tensor x = at::randn({8}).requires_grad_(true);
  constexpr int kOps = 64;
  const double s = median_seconds(
      [&] {
        at::Tensor y = x;
        for (int i = 0; i < kOps; ++i) y = y * 1.0001;
        y.backward(at::ones_like(y));
      },
      3, quick ? 0.03 : 0.15);
  return s / kOps;
}

// Note [contention]: ranks of a CPU run share the machine's cores, caches and memory
// bandwidth, so each computes slower than one alone, and not by a ratio of cores
// (hyper-threads, turbo, bandwidth-bound kernels). The same compute mix (a linear
// layer, a loss over a vocabulary, GELU) is timed by one process alone and by g ranks
// at once; the ratio is the profile's contention for g ranks.
double compute_mix_seconds(bool quick) {
  const at::Tensor x = at::randn({1024, 128}).requires_grad_(true);
  const at::Tensor w = at::randn({512, 128}).requires_grad_(true);
  const at::Tensor logits = at::randn({256, 8192}).requires_grad_(true);
  const at::Tensor target = at::randint(8192, {256}, at::kLong);
  return median_seconds(
      [&] {
        at::Tensor h = at::gelu(at::linear(x, w));
        (h.sum() + at::cross_entropy_loss(logits, target)).backward();
      },
      quick ? 3 : 7, quick ? 0.05 : 0.3);
}

// Note [step calibration]: what the kernels and collectives leave out (the trainer's
// own work per step: autograd's engine, the tracking allocator, data, clipping and
// zeroing, the ranks' skew) is measured by training a reference model: the debug GPT,
// data-parallel over g ranks, a few steps through `strata train` itself. Its median
// step, less the predicted communication, over the predicted rest is the profile's
// step_scale for g ranks, which compute and the optimizer are multiplied by in every
// prediction for g ranks.
double reference_step_scale(const HardwareProfile& p, int64_t g, int64_t threads,
                            const std::string& self_exe) {
  constexpr int64_t kMicro = 4;
  const double measured =
      measured_step_seconds(self_exe, g,
                            {"--model.flavour=debug", "--parallel.dp=" + std::to_string(g),
                             "--training.batch_size=" + std::to_string(2 * kMicro * g),
                             "--training.micro_batch_size=" + std::to_string(kMicro),
                             "--training.threads=" + std::to_string(threads)},
                            7, 3);
  ModelConfig mc;
  mc.flavour = "debug";
  Layout l;
  l.dp = g, l.micro_batch = kMicro;
  HardwareProfile unscaled = p;
  unscaled.step_scale.clear();
  const StepPrediction predicted =
      predict_step(resolve_model_spec(mc, DataShape{}), l, {"fp32", 2 * kMicro * g, 0.0}, unscaled);
  // The scale stretches compute and the optimizer only (the collectives are measured
  // as a step issues them), so it is fitted to what remains of the measured step.
  const double comm = predicted.dp_exposed_s + predicted.tp_comm_s;
  return std::max(1.0, (measured - comm) / std::max(predicted.step_s - comm, 1e-9));
}

}  // namespace

int run_calibrate_worker(const std::string& out, bool quick, int64_t threads) {
  at::set_num_threads(static_cast<int>(threads));
  keep_freed_host_memory();
  const WorldInfo world = init_from_env();
  Config cfg;
  cfg.parallel.timeout_s = 120;
  auto mesh = make_mesh(world, cfg);
  Comm& c = mesh->comm(Axis::kWorld);
  const auto g = c.size();
  const std::vector<double> sizes = quick ? std::vector<double>{4096, 1 << 20}
                                          : std::vector<double>{4096, 65536, 1 << 20, 8 << 20};
  nlohmann::json fits;
  // Note [collective calibration]: a collective timed alone after a barrier misses
  // what it costs inside a step, where each follows compute: the ranks arrive apart
  // and the backend's threads, idle during the compute, wake up (on a CPU machine that
  // cost is most of a small collective's). So each is timed after a slice of compute
  // (a multiply of about a millisecond), whose time alone is then subtracted.
  const at::Tensor work_a = at::randn({256, 256}), work_b = at::randn({256, 512});
  const double work_s = median_seconds([&] { (void)at::mm(work_a, work_b); }, 5, 0.05);
  for (const std::string op : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    std::vector<std::pair<double, double>> samples;
    for (const double bytes : sizes) {
      const int64_t n = static_cast<int64_t>(bytes / 4) / g * g;  // floats, divisible by g
      at::Tensor full = at::ones({n}), part = at::ones({n / g});
      auto once = [&] {
        if (op == "all_reduce") {
          c.all_reduce(full).wait();
        } else if (op == "all_gather") {
          c.all_gather(full, part).wait();
        } else if (op == "reduce_scatter") {
          c.reduce_scatter(part, full).wait();
        } else if (c.rank() < 2) {  // ranks 0 and 1 exchange the buffer; the others idle
          if (c.rank() == 0)
            c.send(full, 1).wait();
          else
            c.recv(full, 0).wait();
        }
      };
      // Every rank runs the same number of repetitions (a collective needs them all),
      // each after a slice of compute, as a training step issues them (Note [collective
      // calibration]); the compute's own time is subtracted.
      const int reps = quick ? 4 : (bytes >= (1 << 20) ? 8 : 24);
      once();
      std::vector<double> t;
      for (int round = 0; round < 3; ++round) {
        c.barrier();
        const auto t0 = Clock::now();
        for (int r = 0; r < reps; ++r) {
          (void)at::mm(work_a, work_b);
          once();
        }
        t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps - work_s);
      }
      std::sort(t.begin(), t.end());
      at::Tensor slowest = at::full({1}, std::max(t[t.size() / 2], 1e-6), at::kDouble);
      c.all_reduce(slowest, c10d::ReduceOp::MAX).wait();
      samples.push_back({static_cast<double>(n * 4), slowest.item<double>()});
    }
    const LinkFit f = fit_link(samples);
    fits[op] = {{"latency_s", f.latency_s}, {"bytes_per_s", f.bytes_per_s}};
  }
  c.barrier();
  at::Tensor mix = at::full({1}, compute_mix_seconds(quick), at::kDouble);
  c.all_reduce(mix).wait();  // the mean over the ranks
  fits["compute_s"] = mix.item<double>() / static_cast<double>(g);
  if (c.rank() == 0) write_file_atomic(out, fits.dump(1));
  return 0;
}

int run_calibrate(const CalibrateArgs& a, const std::string& self_exe) {
  STRATA_CHECK(a.nproc >= 1, "--nproc ", a.nproc, " must be at least 1");
  const auto t0 = Clock::now();
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t threads = a.threads > 0 ? a.threads : std::max<int64_t>(1, cores / a.nproc);
  at::set_num_threads(static_cast<int>(threads));
  keep_freed_host_memory();  // as the trainer does: large blocks are reused, not re-faulted
  char host[256] = "machine";
  gethostname(host, sizeof(host) - 1);
  HardwareProfile p;
  p.name = std::string(host) + ", " + std::to_string(threads) + " thread(s) per rank";
  p.threads = threads;
  p.cores = cores;
  p.ranks_per_node = a.nproc;
  std::printf("calibrate: %s, %lld thread(s) per rank, collectives over 2..%lld ranks (gloo)\n",
              host, static_cast<long long>(threads), static_cast<long long>(a.nproc));
  p.gemm["fp32"] = gemm_curve(at::kFloat, a.quick ? 256 : 2048, a.quick);
  p.gemm["bf16"] = gemm_curve(at::kBFloat16, a.quick ? 256 : 1024, a.quick);
  for (const char* d : {"fp32", "bf16"})
    std::printf("  matmul %s: %.1f GFLOP/s at the largest size, %.1f at the smallest\n", d,
                p.gemm[d].back().flops / p.gemm[d].back().seconds / 1e9,
                p.gemm[d].front().flops / p.gemm[d].front().seconds / 1e9);
  p.memory_bytes_per_s = memory_bandwidth(a.quick);
  std::printf("  memory: %.2f GB/s element-wise (read + write)\n", p.memory_bytes_per_s / 1e9);
  p.kernels = kernel_curves(a.quick);
  p.op_overhead_s = op_overhead(a.quick);
  for (const auto& [k, pts] : p.kernels)
    std::printf("  %s: %.3g to %.3g ns per unit of work\n", k.c_str(),
                pts.front().seconds / pts.front().work * 1e9,
                pts.back().seconds / pts.back().work * 1e9);
  std::printf("  op overhead: %.1f us per op (forward and backward)\n", p.op_overhead_s * 1e6);
  const double alone = compute_mix_seconds(a.quick);
  for (int64_t g = 2; g <= a.nproc; ++g) {
    const std::string part =
        fs::temp_directory_path() /
        ("strata-calibrate-" + std::to_string(getpid()) + "-" + std::to_string(g) + ".json");
    LaunchOptions lo;
    lo.nproc_per_node = g;
    lo.master_port = "auto";
    lo.command = {self_exe, "calibrate-worker", "--out",
                  part,     "--threads",        std::to_string(threads)};
    if (a.quick) lo.command.push_back("--quick");
    STRATA_CHECK(launch(lo) == 0, "calibrate: the collective benchmark over ", g,
                 " ranks failed; see the lines above");
    auto fits = nlohmann::json::parse(read_file(part));
    fs::remove(part);
    p.contention[g] = std::max(1.0, fits["compute_s"].get<double>() / alone);
    std::printf("  %lld ranks at once compute %.2fx slower than one alone\n",
                static_cast<long long>(g), p.contention[g]);
    fits.erase("compute_s");
    for (const auto& [op, f] : fits.items()) {
      p.collectives[op][g] = {f["latency_s"].get<double>(), f["bytes_per_s"].get<double>()};
      std::printf("  %s over %lld ranks: %.1f us + %.2f GB/s\n", op.c_str(),
                  static_cast<long long>(g), f["latency_s"].get<double>() * 1e6,
                  f["bytes_per_s"].get<double>() / 1e9);
    }
  }
  for (int64_t g = 1; g <= a.nproc; ++g) {
    p.step_scale[g] = reference_step_scale(p, g, threads, self_exe);
    std::printf("  reference step on %lld rank(s): compute %.2fx the kernels' sum\n",
                static_cast<long long>(g), p.step_scale[g]);
  }
  const std::string out = a.out.empty() ? default_profile_path(threads) : a.out;
  fs::create_directories(fs::path(out).parent_path().empty() ? "." : fs::path(out).parent_path());
  write_file_atomic(out, profile_json(p).dump(1) + "\n");
  std::printf("profile: %s (%.1f s)\n", out.c_str(),
              std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace strata
