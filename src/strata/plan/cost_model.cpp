#include "strata/plan/cost_model.h"

#include <algorithm>

#include "strata/core/errors.h"
#include "strata/models/gpt.h"
#include "strata/parallel/pipeline/partition.h"
#include "strata/parallel/pipeline/schedule.h"
#include "strata/parallel/pipeline/simulate.h"
#include "strata/plan/estimator.h"

namespace strata {

namespace {

struct BlockCost {
  double forward = 0, backward = 0, recompute = 0, tp_comm = 0;  // one block, one micro-batch
};

// One block's cost for a micro-batch of `mb` sequences (Note [cost model]).
BlockCost block_cost(const ModelSpec& s, const Layout& l, const HardwareProfile& hw,
                     const std::string& dtype, double elem) {
  const double T = static_cast<double>(s.seq_len), d = static_cast<double>(s.d_model);
  const double tp = static_cast<double>(l.tp), N = static_cast<double>(l.micro_batch) * T;
  const double heads = static_cast<double>(s.n_head) / tp, dh = d / static_cast<double>(s.n_head);
  auto mm = [&](double m, double k, double n) { return hw.gemm_seconds(dtype, 2 * m * k * n); };
  const double linears =
      mm(N, d, 3 * d / tp) + mm(N, d / tp, d) + mm(N, d, 4 * d / tp) + mm(N, 4 * d / tp, d);
  // Attention: two batched products per (sequence, head) of T x dh by dh x T and back.
  const double core = 2 * static_cast<double>(l.micro_batch) * heads * mm(T, dh, T);
  // Element-wise bytes in forward: norms, residuals and dropout on the (replicated or,
  // under SP, split) stream, GELU and biases on this rank's 4d/tp, the softmax's T x T.
  const double stream = l.sequence_parallel ? N / tp : N;
  const double elementwise = (stream * d * 10 + N * 4 * d / tp * 3) * elem +
                             static_cast<double>(l.micro_batch) * heads * T * T * 4 * 3;
  const double ew = hw.memory_bytes_per_s > 0 ? elementwise / hw.memory_bytes_per_s : 0;
  BlockCost c;
  c.forward = linears + core + ew;
  c.backward = 2 * (linears + core) + 2 * ew;
  if (l.recompute == "full") c.recompute = c.forward;
  if (l.recompute == "selective") c.recompute = core;
  if (l.tp > 1) c.tp_comm = 2 * hw.collective_seconds("all_reduce", l.tp, N * d * elem);
  return c;
}

}  // namespace

StepPrediction predict_step(const ModelSpec& s, const Layout& l, const CostOptions& o,
                            const HardwareProfile& hw) {
  STRATA_CHECK(is_language_model(s.family), "the cost model covers GPT and BERT flavours; ",
               s.flavour, " is not one");
  const bool half = o.precision != "fp32";
  const std::string dtype = half && hw.gemm.count("bf16") ? "bf16" : "fp32";
  const double elem = half ? 2 : 4;
  const double T = static_cast<double>(s.seq_len), d = static_cast<double>(s.d_model);
  const double N = static_cast<double>(l.micro_batch) * T, tp = static_cast<double>(l.tp);
  const int64_t m = o.batch / (l.micro_batch * l.dp);  // micro-batches per step
  STRATA_CHECK(m >= 1, "the batch ", o.batch, " does not fill one micro-batch of ", l.micro_batch,
               " on each of ", l.dp, " replicas");
  BlockCost b = block_cost(s, l, hw, dtype, elem);
  // Ranks of a CPU run share the machine's cores: with more threads in all than cores,
  // compute stretches by the ratio (the profile timed one rank alone).
  const double world = static_cast<double>(l.dp * l.tp * l.pp);
  const double share =
      hw.cores > 0
          ? std::max(1.0, world * static_cast<double>(hw.threads) / static_cast<double>(hw.cores))
          : 1.0;

  // The ends: embedding lookups, the head's vocabulary GEMM and fp32 cross-entropy.
  const double V = static_cast<double>(s.padded_vocab(l.tp)) / tp;
  const double head_mm = share * hw.gemm_seconds(dtype, 2 * N * d * V);
  const double head_ew =
      hw.memory_bytes_per_s > 0 ? share * N * V * 4 * 4 / hw.memory_bytes_per_s : 0;
  const double embed_ew =
      hw.memory_bytes_per_s > 0 ? share * N * d * elem * 4 / hw.memory_bytes_per_s : 0;
  b.forward *= share, b.backward *= share, b.recompute *= share;

  // Each virtual stage's forward and backward per micro-batch.
  const int64_t stages = l.pp * l.pp_virtual;
  std::vector<int64_t> blocks(1, s.n_layer);
  if (stages > 1) blocks = stage_partition(s, "auto", stages, l.pp_virtual);
  std::vector<double> fwd(static_cast<size_t>(stages)), bwd(fwd.size()), rec(fwd.size()),
      tpc(fwd.size());
  for (int64_t v = 0; v < stages; ++v) {
    const auto nb = static_cast<double>(blocks[static_cast<size_t>(v)]);
    double f = nb * b.forward, bw = nb * b.backward;
    if (v == 0) f += embed_ew, bw += embed_ew;
    if (v == stages - 1) f += head_mm + head_ew, bw += 2 * head_mm + head_ew;
    fwd[static_cast<size_t>(v)] = f;
    bwd[static_cast<size_t>(v)] = bw;
    rec[static_cast<size_t>(v)] = nb * b.recompute;
    tpc[static_cast<size_t>(v)] = nb * 2 * b.tp_comm;  // forward's two and backward's two
  }
  const double p2p = l.pp > 1 ? hw.collective_seconds("send_recv", 2,
                                                      N * d * elem / (l.sequence_parallel ? tp : 1))
                              : 0;
  auto stage_of = [&](int64_t rank, const Action& a) { return a.chunk * l.pp + rank; };
  const ActionCost cost = [&](int64_t rank, const Action& a) -> double {
    const auto v = static_cast<size_t>(stage_of(rank, a));
    switch (a.type) {
      case ActionType::kForward:
        return fwd[v] + tpc[v] / 2;
      case ActionType::kBackward:
        return bwd[v] + rec[v] + tpc[v] / 2;
      case ActionType::kBackwardInput:
        return bwd[v] / 2 + rec[v] + tpc[v] / 2;
      case ActionType::kBackwardWeight:
        return bwd[v] / 2;
      case ActionType::kSendActivation:
      case ActionType::kSendGrad:
        return p2p;
      default:
        return 0;
    }
  };
  const auto schedule =
      l.pp == 1 && l.pp_virtual == 1
          ? single_stage_schedule(m)
          : pipeline_schedule(parse_schedule_kind(l.schedule), l.pp, m, l.pp_virtual);
  const Simulation sim = simulate_schedule(schedule, cost);
  STRATA_CHECK(sim.error.empty(), "the schedule deadlocks: ", sim.error);

  StepPrediction p;
  // The busiest rank's shares.
  int64_t busiest = 0;
  for (int64_t r = 0; r < l.pp; ++r)
    if (sim.busy[static_cast<size_t>(r)] > sim.busy[static_cast<size_t>(busiest)]) busiest = r;
  for (int64_t c = 0; c < l.pp_virtual; ++c) {
    const auto v = static_cast<size_t>(c * l.pp + busiest);
    p.compute_s += static_cast<double>(m) * (fwd[v] + bwd[v]);
    p.recompute_s += static_cast<double>(m) * rec[v];
    p.tp_comm_s += static_cast<double>(m) * tpc[v];
  }
  p.bubble_s = std::max(0.0, sim.step_time - sim.busy[static_cast<size_t>(busiest)]);

  // Data parallel: this rank's parameters and gradients.
  const ParameterCount pc = count_parameters(s, l.tp);
  const double params = static_cast<double>(pc.trainable) / static_cast<double>(l.pp);
  const double grad_bytes = params * elem, dp = static_cast<double>(l.dp);
  const double last_backward = bwd.back();
  auto hidden = [&](double comm, double behind) {
    return std::max(comm - o.overlap * behind, (1 - o.overlap) * comm);
  };
  if (l.dp > 1) {
    if (l.zero == 0) {
      p.dp_exposed_s = hidden(hw.collective_seconds("all_reduce", l.dp, grad_bytes), last_backward);
    } else if (l.zero <= 2) {
      const double rs = hw.collective_seconds("reduce_scatter", l.dp, grad_bytes);
      const double per_step = l.zero == 2 ? static_cast<double>(m) * rs : rs;
      p.dp_exposed_s = hidden(per_step, static_cast<double>(m) * last_backward) +
                       hw.collective_seconds("all_gather", l.dp, params * elem);
    } else {
      // ZeRO-3: per block and micro-batch, gathers in forward and backward and a
      // reduce-scatter, behind the block's compute by prefetch.
      const double unit = static_cast<double>(pc.per_block) * elem;
      const double per_block = 2 * hw.collective_seconds("all_gather", l.dp, unit) +
                               hw.collective_seconds("reduce_scatter", l.dp, unit);
      const double comm = static_cast<double>(m) * static_cast<double>(s.n_layer) /
                          static_cast<double>(l.pp) * per_block;
      p.dp_exposed_s = hidden(comm, p.compute_s);
    }
  }
  // AdamW reads parameter, gradient and two moments and writes three (fp32), plus the
  // half copy with master weights.
  const double shard = l.zero > 0 ? params / dp : params;
  if (hw.memory_bytes_per_s > 0)
    p.optimizer_s = share * shard * (28 + (half ? 4 : 0)) / hw.memory_bytes_per_s;
  if (l.offload && hw.host_to_device_bytes_per_s > 0)
    p.offload_s =
        shard * elem / hw.device_to_host_bytes_per_s + shard * elem / hw.host_to_device_bytes_per_s;
  p.step_s = sim.step_time + p.dp_exposed_s + p.optimizer_s + p.offload_s;
  p.tokens_per_s = static_cast<double>(o.batch) * T / p.step_s;
  const double peak = hw.peak_flops(dtype);
  const double flops_per_token = transformer_flops_per_token(s);
  p.mfu = peak > 0 ? flops_per_token * p.tokens_per_s / (world * peak) : 0;
  return p;
}

}  // namespace strata
