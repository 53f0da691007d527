// A rank for the multi-process tests: exercises every collective of distributed/comm on
// a mesh and checks the results. Modes: "collectives DP TP" (exit 0 when all
// results are right; with tp > 1 also the tensor-parallel regions), "die" (rank 1 is killed before
// an all_reduce; the others must fail with a CommError instead of hanging).
#include <signal.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "strata/core/errors.h"
#include "strata/distributed/mesh.h"
#include "strata/models/build.h"
#include "strata/parallel/grad_sync.h"
#include "strata/parallel/pipeline/executor.h"
#include "strata/parallel/pipeline/partition.h"
#include "strata/parallel/tensor/regions.h"

using namespace strata;

namespace {

int g_failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++g_failures;
  }
}

void check_axis(Comm& c, const std::string& label) {
  const auto n = c.size();
  const auto r = c.rank();
  const double rr = static_cast<double>(r);
  // all_reduce: sum of (rank + 1) = n (n + 1) / 2
  at::Tensor t = at::full({5}, rr + 1);
  c.all_reduce(t).wait();
  expect(at::allclose(t, at::full({5}, n * (n + 1) / 2.0)), label + " all_reduce sum");
  at::Tensor mx = at::full({3}, rr);
  c.all_reduce(mx, c10d::ReduceOp::MAX).wait();
  expect(at::allclose(mx, at::full({3}, static_cast<double>(n - 1))), label + " all_reduce max");
  // reduce_scatter: input chunk j holds (rank + 1) * (j + 1); chunk r sums to (j=r+1) * n(n+1)/2
  at::Tensor in = (at::arange(n, at::kFloat).repeat_interleave(4) + 1) * (rr + 1);
  at::Tensor out = at::empty({4});
  c.reduce_scatter(out, in).wait();
  expect(at::allclose(out, at::full({4}, (rr + 1) * n * (n + 1) / 2.0)), label + " reduce_scatter");
  // all_gather: chunk j == j
  at::Tensor mine = at::full({3}, rr);
  at::Tensor all = at::empty({3 * n});
  c.all_gather(all, mine).wait();
  expect(at::allclose(all, at::arange(n, at::kFloat).repeat_interleave(3)), label + " all_gather");
  // broadcast from the last member
  at::Tensor b = at::full({2}, rr * 10);
  c.broadcast(b, n - 1).wait();
  expect(at::allclose(b, at::full({2}, (n - 1) * 10.0)), label + " broadcast");
  // send/recv around a ring, asynchronous on both sides
  if (n > 1) {
    at::Tensor s = at::full({6}, rr);
    at::Tensor got = at::empty({6});
    auto ws = c.send(s, (r + 1) % n, 7);
    auto wr = c.recv(got, (r + n - 1) % n, 7);
    ws.wait();
    wr.wait();
    expect(at::allclose(got, at::full({6}, static_cast<double>((r + n - 1) % n))),
           label + " send/recv");
  }
  c.barrier();
}

// The tensor-parallel regions (parallel/tensor) forward and backward: G is a global
// (B, T, C) tensor, W a gradient, rank r's sequence slice is positions [r T/n, (r+1) T/n).
void check_regions(Comm& c) {
  const int64_t n = c.size(), r = c.rank(), Tl = 3;
  const double rr = static_cast<double>(r), tri = static_cast<double>(n * (n + 1) / 2);
  auto regions = make_tp_regions(c);
  const at::Tensor G = at::arange(2 * n * Tl * 4, at::kFloat).view({2, n * Tl, 4});
  const at::Tensor W = at::cos(G);
  auto mine = [&](const at::Tensor& t) { return t.narrow(1, r * Tl, Tl); };
  struct Case {
    std::string name;
    std::function<at::Tensor(const at::Tensor&)> fn;
    at::Tensor in, out, grad, in_grad;
  };
  const std::vector<Case> cases = {
      {"copy_to", [&](const at::Tensor& x) { return regions->copy_to(x); }, G, G, (rr + 1) * W,
       tri * W},
      {"reduce_from", [&](const at::Tensor& x) { return regions->reduce_from(x); }, (rr + 1) * G,
       tri * G, W, W},
      {"gather_for_tp", [&](const at::Tensor& x) { return regions->gather_for_tp(x); }, mine(G), G,
       (rr + 1) * W, tri * mine(W)},
      {"reduce_scatter_from_tp",
       [&](const at::Tensor& x) { return regions->reduce_scatter_from_tp(x); }, (rr + 1) * G,
       tri * mine(G), mine(W), W},
      {"scatter_to_sequence", [&](const at::Tensor& x) { return regions->scatter_to_sequence(x); },
       G, mine(G), mine(W), W},
      {"gather_from_sequence",
       [&](const at::Tensor& x) { return regions->gather_from_sequence(x); }, mine(G), G, W,
       mine(W)},
  };
  for (const Case& k : cases) {
    at::Tensor x = k.in.clone().requires_grad_(true);
    at::Tensor y = k.fn(x);
    expect(y.sizes() == k.out.sizes() && at::allclose(y, k.out),
           "tp region " + k.name + " forward");
    y.backward(k.grad);
    expect(x.grad().defined() && at::allclose(x.grad(), k.in_grad),
           "tp region " + k.name + " backward");
  }
}

// One step of a real pipeline (Note [pipeline executor]) against one process: a small
// untied GPT cut into p·v virtual stages (uniform blocks), m micro-batches of 2
// sequences, the schedule's lists run with real sends and receives over the pp group.
// Every rank also runs the whole model on the same micro-batches; each part's
// gradients must equal the whole model's (1e-5 relative), and the last virtual stage's
// loss sum the whole model's.
void check_pipeline(Comm& pp, const std::string& schedule, int64_t m, int64_t v) {
  const int64_t p = pp.size(), r = pp.rank();
  ModelConfig mc;
  mc.flavour = "debug";
  mc.n_layer = 2 * p * v;
  mc.d_model = 32;
  mc.n_head = 4;
  mc.seq_len = 16;
  mc.vocab_size = 64;
  mc.dropout = 0;
  mc.tied_embedding = false;
  const ModelSpec spec = resolve_model_spec(mc, {});
  auto batch_of = [&](int64_t micro) {
    at::manual_seed(static_cast<uint64_t>(100 + micro));
    return Batch{at::randint(64, {2, 16}), at::randint(64, {2, 16}), {}};
  };
  at::manual_seed(7);
  auto whole = build_model(spec, StageInfo::whole(), {});
  double want = 0;
  for (int64_t i = 0; i < m; ++i) {
    at::Tensor loss = whole->forward_loss(batch_of(i));
    (loss / static_cast<double>(m)).backward();
    want += loss.item<double>();
  }
  const auto blocks = uniform_partition(spec.n_layer, p * v);
  std::vector<std::shared_ptr<Model>> parts;
  std::vector<NamedParam> params;
  for (int64_t c = 0; c < v; ++c) {
    const int64_t vs = c * p + r;
    int64_t begin = 0;
    for (int64_t s = 0; s < vs; ++s) begin += blocks[static_cast<size_t>(s)];
    at::manual_seed(7);
    parts.push_back(build_model(
        spec, {begin, begin + blocks[static_cast<size_t>(vs)], vs == 0, vs == p * v - 1}, {}));
    for (auto& item : parts.back()->named_parameters())
      params.push_back({item.key(), item.value()});
  }
  LocalGradSync sync(params);
  StepContext ctx{
      parts,       sync,      c10::DeviceType::CPU, at::kFloat, 1.0 / static_cast<double>(m), &pp,
      {2, 16, 32}, at::kFloat};
  std::vector<TimedAction> timeline;
  ctx.timeline = &timeline;
  const auto lists = pipeline_schedule(parse_schedule_kind(schedule), p, m, v);
  const auto released = sent_gradients_done(lists, r);  // Note [sent gradients released]
  ctx.sent_gradients_done = &released;
  const double got = run_stage_actions(lists[static_cast<size_t>(r)], m, ctx, batch_of);
  const std::string at = schedule + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                         " v=" + std::to_string(v) + " rank " + std::to_string(r);
  if (r == (p * v - 1) % p) expect(std::abs(got - want) <= 1e-5 * std::abs(want), at + " loss sum");
  auto w = whole->named_parameters();
  int64_t compared = 0;
  for (auto& part : parts)
    for (auto& item : part->named_parameters()) {
      const at::Tensor g = item.value().grad(), ref = w[item.key()].grad();
      const bool ok = g.defined() && ref.defined() &&
                      (g - ref).norm().item<double>() <= 1e-5 * ref.norm().item<double>() + 1e-9;
      expect(ok, at + " gradient of " + item.key());
      ++compared;
    }
  expect(compared > 0, at + " holds parameters");
  // The recorded timeline is the list, in order, each action after the previous one.
  const StageActions& mine = lists[static_cast<size_t>(r)];
  bool ordered = timeline.size() == mine.size();
  for (size_t i = 0; ordered && i < timeline.size(); ++i)
    ordered = timeline[i].action == mine[i] && timeline[i].end >= timeline[i].start &&
              (i == 0 || timeline[i].start >= timeline[i - 1].end);
  expect(ordered, at + " timeline records every action in order");
  pp.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "collectives";
    WorldInfo info = world_from_env();
    if (mode == "die") {
      ParallelDims dims(0, 1, 1, info.world_size);
      Mesh mesh(info, dims, c10::DeviceType::CPU, std::chrono::milliseconds(5000));
      mesh.comm(Axis::kWorld).barrier();
      if (info.rank == 1) {
        std::printf("rank 1 dies now\n");
        std::fflush(stdout);
        raise(SIGKILL);
      }
      at::Tensor t = at::ones({1 << 20});
      for (int i = 0; i < 1000; ++i) mesh.comm(Axis::kWorld).all_reduce(t).wait();
      std::fprintf(stderr, "FAILED: all_reduce kept succeeding after rank 1 died\n");
      return 1;
    }
    if (mode == "pipeline") {
      // pipeline SCHEDULE M V: every rank a stage (pp = world).
      ParallelDims dims(1, 1, info.world_size, info.world_size);
      Mesh mesh(info, dims, c10::DeviceType::CPU, std::chrono::milliseconds(30000));
      check_pipeline(mesh.comm(Axis::kPp), argv[2], std::atoll(argv[3]), std::atoll(argv[4]));
      if (g_failures == 0)
        std::printf("rank %lld: pipeline step correct\n", static_cast<long long>(info.rank));
      return g_failures == 0 ? 0 : 1;
    }
    const int64_t dp = argc > 2 ? std::atoll(argv[2]) : 0;
    const int64_t tp = argc > 3 ? std::atoll(argv[3]) : 1;
    ParallelDims dims(dp, tp, 1, info.world_size);
    Mesh mesh(info, dims, c10::DeviceType::CPU, std::chrono::milliseconds(30000));
    for (Axis a : {Axis::kWorld, Axis::kDp, Axis::kTp}) check_axis(mesh.comm(a), axis_name(a));
    if (mesh.comm(Axis::kTp).size() > 1) check_regions(mesh.comm(Axis::kTp));
    // Each group's members must be the ranks the pure grid says.
    auto g = dims.group_of(Axis::kTp, info.rank);
    for (int64_t i = 0; i < mesh.comm(Axis::kTp).size(); ++i)
      expect(mesh.comm(Axis::kTp).global_rank(i) == g[static_cast<size_t>(i)],
             "tp group membership");
    if (g_failures == 0)
      std::printf("rank %lld: all collectives correct\n", static_cast<long long>(info.rank));
    return g_failures == 0 ? 0 : 1;
  } catch (const CommError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
