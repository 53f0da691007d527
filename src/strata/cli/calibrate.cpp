#include "strata/cli/calibrate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "strata/api/strata.h"
#include "strata/cli/plan.h"
#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/distributed/launcher.h"
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

}  // namespace

int run_calibrate_worker(const std::string& out, bool quick) {
  const WorldInfo world = init_from_env();
  Config cfg;
  cfg.parallel.timeout_s = 120;
  auto mesh = make_mesh(world, cfg);
  Comm& c = mesh->comm(Axis::kWorld);
  const auto g = c.size();
  const std::vector<double> sizes = quick ? std::vector<double>{4096, 1 << 20}
                                          : std::vector<double>{4096, 65536, 1 << 20, 8 << 20};
  nlohmann::json fits;
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
      // Every rank runs the same number of repetitions (a collective needs them all).
      const int reps = quick ? 3 : (bytes >= (1 << 20) ? 5 : 20);
      c.barrier();
      once();
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        c.barrier();
        const auto t0 = Clock::now();
        once();
        t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      std::sort(t.begin(), t.end());
      at::Tensor slowest = at::full({1}, t[t.size() / 2], at::kDouble);
      c.all_reduce(slowest, c10d::ReduceOp::MAX).wait();
      samples.push_back({static_cast<double>(n * 4), slowest.item<double>()});
    }
    const LinkFit f = fit_link(samples);
    fits[op] = {{"latency_s", f.latency_s}, {"bytes_per_s", f.bytes_per_s}};
  }
  if (c.rank() == 0) write_file_atomic(out, fits.dump(1));
  return 0;
}

int run_calibrate(const CalibrateArgs& a, const std::string& self_exe) {
  STRATA_CHECK(a.nproc >= 1, "--nproc ", a.nproc, " must be at least 1");
  const auto t0 = Clock::now();
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t threads = a.threads > 0 ? a.threads : std::max<int64_t>(1, cores / a.nproc);
  at::set_num_threads(static_cast<int>(threads));
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
  for (int64_t g = 2; g <= a.nproc; ++g) {
    const std::string part =
        fs::temp_directory_path() /
        ("strata-calibrate-" + std::to_string(getpid()) + "-" + std::to_string(g) + ".json");
    LaunchOptions lo;
    lo.nproc_per_node = g;
    lo.master_port = "auto";
    lo.command = {self_exe, "calibrate-worker", "--out", part};
    if (a.quick) lo.command.push_back("--quick");
    STRATA_CHECK(launch(lo) == 0, "calibrate: the collective benchmark over ", g,
                 " ranks failed; see the lines above");
    const auto fits = nlohmann::json::parse(read_file(part));
    fs::remove(part);
    for (const auto& [op, f] : fits.items()) {
      p.collectives[op][g] = {f["latency_s"].get<double>(), f["bytes_per_s"].get<double>()};
      std::printf("  %s over %lld ranks: %.1f us + %.2f GB/s\n", op.c_str(),
                  static_cast<long long>(g), f["latency_s"].get<double>() * 1e6,
                  f["bytes_per_s"].get<double>() / 1e9);
    }
  }
  const std::string out = a.out.empty() ? default_profile_path(threads) : a.out;
  fs::create_directories(fs::path(out).parent_path().empty() ? "." : fs::path(out).parent_path());
  write_file_atomic(out, profile_json(p).dump(1) + "\n");
  std::printf("profile: %s (%.1f s)\n", out.c_str(),
              std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace strata
