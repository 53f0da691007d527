// A rank for the DDP tests. Every rank trains a DDP-wrapped model on its shard of
// each global batch and, in the same process, a plain copy on the whole global
// batch (the single-process reference); after the steps it compares the two.
//
//   ddp_worker key=value...
//     steps=20 accum=1 hook=none|fp16|bf16|powersgd unused=0|1 find_unused=0|1
//     sometimes=0|1 (a branch used by even ranks on even steps only)
//     tol=1e-5 (max |ddp - ref| / max(|ref|) per parameter)  mismatch=0|1
//     powersgd_rank=R  min_compression=C  start_iter=S
// Prints "ddp matches reference: max rel diff X, B buckets" and exits 0, or
// "FAILED: ..." and exits 1; errors exit 2 with one "error:" line.
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "strata/core/errors.h"
#include "strata/distributed/mesh.h"
#include "strata/optim/adamw.h"
#include "strata/parallel/data/ddp.h"
#include "strata/parallel/data/powersgd.h"

using namespace strata;

namespace {

struct Net : torch::nn::Module {
  Net(bool unused, bool with_sometimes, bool wide) {
    a = register_module("a", torch::nn::Linear(8, 32));
    b = register_module("b", torch::nn::Linear(32, wide ? 33 : 32));
    c = register_module("c", torch::nn::Linear(wide ? 33 : 32, 4));
    if (with_sometimes)
      sometimes = register_module("sometimes", torch::nn::Linear(wide ? 33 : 32, 4));
    if (unused) never = register_module("never", torch::nn::Linear(4, 4));
  }
  at::Tensor forward(const at::Tensor& x, bool use_sometimes) {
    at::Tensor h = at::tanh(b(at::tanh(a(x))));  // (B, 32)
    at::Tensor y = c(h);                         // (B, 4)
    if (use_sometimes) y = y + sometimes(h);
    return y;
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr}, sometimes{nullptr}, never{nullptr};
};

std::vector<NamedParam> named(Net& n) {
  std::vector<NamedParam> out;
  for (auto& p : n.named_parameters()) out.push_back({p.key(), p.value()});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::map<std::string, std::string> arg;
    for (int i = 1; i < argc; ++i) {
      std::string s = argv[i];
      auto eq = s.find('=');
      arg[s.substr(0, eq)] = eq == std::string::npos ? "1" : s.substr(eq + 1);
    }
    auto get = [&](const std::string& k, const std::string& d) {
      return arg.count(k) ? arg[k] : d;
    };
    const int64_t steps = std::stoll(get("steps", "20"));
    const int64_t accum = std::stoll(get("accum", "1"));
    const bool unused = get("unused", "0") == "1";
    const bool sometimes = get("sometimes", "0") == "1";
    const double tol = std::stod(get("tol", "1e-5"));
    const std::string hook = get("hook", "none");

    WorldInfo info = world_from_env();
    at::set_num_threads(1);
    ParallelDims dims(0, 1, 1, info.world_size);
    Mesh mesh(info, dims, c10::DeviceType::CPU, std::chrono::milliseconds(20000));
    Comm& comm = mesh.comm(Axis::kDp);
    const int64_t world = comm.size(), rank = comm.rank();

    // Different seeds per rank: DDP must broadcast rank 0's weights.
    at::manual_seed(100 + static_cast<uint64_t>(rank));
    const bool wide = get("mismatch", "0") == "1" && rank == 1;
    auto model = std::make_shared<Net>(unused, sometimes, wide);
    at::manual_seed(100);
    auto ref = std::make_shared<Net>(unused, sometimes, false);

    ParallelConfig pc;
    pc.bucket_cap_mb = 0.004;     // ~1000 floats: several buckets
    pc.first_bucket_mb = 0.0005;  // ~130 floats
    pc.find_unused_parameters = get("find_unused", "0") == "1";
    pc.comm_hook = hook;
    DdpOptions opts = ddp_options_from(pc);
    if (hook == "powersgd") {
      PowerSgdOptions po;
      po.rank = std::stoll(get("powersgd_rank", "1"));
      po.min_compression = std::stod(get("min_compression", "2"));
      po.start_iter = std::stoll(get("start_iter", "2"));
      opts.hook = std::make_shared<PowerSgdHook>(po);
    }
    DistributedDataParallel ddp(model, comm, opts);

    auto mp = named(*model), rp = named(*ref);
    for (auto& np : rp) np.param.mutable_grad() = at::zeros_like(np.param);
    AdamW opt(mp, {0.9, 0.95, 1e-8, 0.1}), ropt(rp, {0.9, 0.95, 1e-8, 0.1});

    // Gradients are views into the buckets: one storage per bucket.
    std::set<const void*> storages;
    for (auto& np : mp) storages.insert(np.param.grad().storage().data());
    if (static_cast<int64_t>(storages.size()) != ddp.num_buckets()) {
      std::fprintf(stderr, "FAILED: %zu gradient storages for %lld buckets\n", storages.size(),
                   static_cast<long long>(ddp.num_buckets()));
      return 1;
    }

    const int64_t global = 8 * world * accum;  // 8 samples per rank per micro-step
    const int64_t per_rank = global / world, micro = per_rank / accum;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
    for (int64_t step = 0; step < steps; ++step) {
      at::Tensor x = at::randn({global, 8}, gen);
      at::Tensor y = at::randn({global, 4}, gen);
      auto uses = [&](int64_t r) { return sometimes && r % 2 == 0 && step % 2 == 0; };
      for (int64_t m = 0; m < accum; ++m) {
        std::optional<DistributedDataParallel::NoSync> no_sync;
        if (m + 1 < accum) no_sync.emplace(ddp);
        const int64_t begin = rank * per_rank + m * micro;
        at::Tensor loss = ddp.forward_loss([&] {
          return at::mse_loss(model->forward(x.narrow(0, begin, micro), uses(rank)),
                              y.narrow(0, begin, micro));
        });
        (loss / static_cast<double>(accum)).backward();
      }
      // Reference: every rank's micro-batches, each loss weighted 1 / (accum * world).
      for (int64_t r = 0; r < world; ++r)
        for (int64_t m = 0; m < accum; ++m) {
          const int64_t begin = r * per_rank + m * micro;
          at::Tensor loss = at::mse_loss(ref->forward(x.narrow(0, begin, micro), uses(r)),
                                         y.narrow(0, begin, micro));
          (loss / static_cast<double>(accum * world)).backward();
        }
      opt.step(1e-2);
      ropt.step(1e-2);
      // Odd steps: the set-to-none path (fresh gradients copied into the buckets);
      // even steps: zeroed buckets accumulated into in place.
      if (step % 2)
        ddp.zero_grad();
      else
        opt.zero_grad();
      ropt.zero_grad();
    }
    double worst = 0;
    std::string where;
    for (size_t i = 0; i < mp.size(); ++i) {
      const double scale = std::max(1e-12, rp[i].param.abs().max().item<double>());
      const double d = (mp[i].param - rp[i].param).abs().max().item<double>() / scale;
      if (std::isnan(d) || d > worst) {  // NaN counts as the worst
        worst = std::isnan(d) ? INFINITY : d;
        where = mp[i].name;
      }
    }
    DdpStats st = ddp.take_stats();
    if (!(worst <= tol)) {
      std::fprintf(stderr, "FAILED: rank %lld: %s differs from the reference by %.3g (> %.3g)\n",
                   static_cast<long long>(rank), where.c_str(), worst, tol);
      return 1;
    }
    std::printf("ddp matches reference: max rel diff %.3g, %lld buckets, sent %lld of %lld bytes\n",
                worst, static_cast<long long>(ddp.num_buckets()),
                static_cast<long long>(st.bytes_sent),
                static_cast<long long>(st.bytes_uncompressed));
    return 0;
  } catch (const CommError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::fprintf(stderr, "error: %s\n", msg.substr(0, msg.find('\n')).c_str());
    return 2;
  }
}
