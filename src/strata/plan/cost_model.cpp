#include "strata/plan/cost_model.h"

#include <algorithm>
#include <optional>

#include "strata/core/errors.h"
#include "strata/models/gpt.h"
#include "strata/parallel/pipeline/partition.h"
#include "strata/parallel/pipeline/schedule.h"
#include "strata/parallel/pipeline/simulate.h"
#include "strata/plan/estimator.h"

namespace strata {

namespace {
double elementwise_seconds(const HardwareProfile& hw, double bytes) {
  return hw.memory_bytes_per_s > 0 ? bytes / hw.memory_bytes_per_s : 0;
}

// The run's precision as the model prices it: half runs multiply in bf16 where the
// profile has bf16 rates, and keep activations in two bytes.
struct Precision {
  bool half;
  std::string dtype;
  double elem;
};
Precision precision_of(const CostOptions& o, const HardwareProfile& hw) {
  const bool half = o.precision != "fp32";
  return {half, half && hw.gemm.count("bf16") ? "bf16" : "fp32", half ? 2.0 : 4.0};
}

// Note [op counts]: the autograd ops one micro-batch runs through each part (forward
// ops; each has a backward node), counted from the models' forward code: every op
// pays the profile's op_overhead_s, which is what makes one-sequence micro-batches and
// thin tensor-parallel slices cost more than their FLOPs on a CPU. Views count: they
// are ops with autograd nodes too.
constexpr double kBlockOps = 30;        // norms, linears as matmul + view, q/k/v views, sdpa, adds
constexpr double kTpBlockOps = 6;       // the regions' copies and reductions, and their views
constexpr double kGptHeadOps = 10;      // final norm, tied head matmul, views, cross-entropy
constexpr double kBertHeadOps = 16;     // + the MLM transform's dense, GELU and norm
constexpr double kTpHeadOps = 10;       // vocab-parallel loss: max, sum, target pick, masks
constexpr double kEmbedOps = 6;         // lookups, positions, add (BERT: + types and a norm)
constexpr double kDropoutBlockOps = 2;  // the stream's two dropouts

// The mean length of a simulated step's waits: each rank's idle gaps between the end of
// one action and the start of the next (Note [waiting ranks' load]).
double mean_wait(const Simulation& sim) {
  double idle = 0;
  int64_t waits = 0;
  for (const auto& line : sim.timeline) {
    double t = 0;
    for (const TimedAction& a : line) {
      if (a.start > t * (1 + 1e-9) + 1e-12) idle += a.start - t, ++waits;
      t = a.end;
    }
  }
  return waits > 0 ? idle / static_cast<double>(waits) : 0.0;
}
}  // namespace

PartCosts predict_parts(const ModelSpec& s, const Layout& l, const CostOptions& o,
                        const HardwareProfile& hw) {
  const Precision prec = precision_of(o, hw);
  const std::string& dtype = prec.dtype;
  const double elem = prec.elem;
  const bool bert = s.family == Family::kBert;
  const double T = static_cast<double>(s.seq_len), d = static_cast<double>(s.d_model);
  const double tp = static_cast<double>(l.tp), mb = static_cast<double>(l.micro_batch);
  const double N = mb * T;
  const double heads = static_cast<double>(s.n_head) / tp, dh = d / static_cast<double>(s.n_head);
  auto mm = [&](double m, double k, double n) { return hw.gemm_seconds(dtype, 2 * m * k * n); };
  // Forward and backward of a kernel in the run's dtype from the profile, or bytes over
  // the bandwidth.
  auto kernel = [&](const std::string& name, double work, double bytes) {
    return hw.kernel_seconds(name + "/" + dtype, work, elementwise_seconds(hw, bytes));
  };
  const double stream = l.sequence_parallel ? N / tp : N;  // rows of the residual stream here
  const double ops = hw.op_overhead_s;
  // Groups smaller than the world take its loaded fits (Note [collectives in a loaded
  // world]).
  //
  // Note [tensor-parallel waits]: a tp group's ranks meet at every block's
  // collectives, and one that a partner reaches late waits for it (its jitter, a
  // partner off its core when the ranks outnumber the cores, the threads' wake-ups),
  // which the collectives timed after even slices of compute do not see. Priced as a
  // fixed wait per collective (1.7 ms at 4 ranks) the debug GPT's micro-batch-1 and
  // sequence-parallel layouts went up to 82% over. Priced as a stretch of compute, the
  // tensor-parallel reference's step scale (Note [tensor-parallel step scale]), the
  // d384 GPT's tp layouts first went up to 47% over, while it inherited the debug GPT's
  // kernel error; with the parts timed (Note [measured parts]) the same stretch brought
  // the last 4-rank bench runs' medians from 10.2-15.5% to 6.6-10.1% (maxima 20.8-75.0%
  // to 16.6-27.6%, re-predicted). It is taken only where the ranks outnumber the cores:
  // at 2 ranks on 2 cores the reference came out 1.44x the data-parallel one and put
  // the tp layouts up to 47% over, which ran within a few percent of their prediction
  // without it.
  // Note [tensor-parallel collectives in a run]: a tp pair inside a larger world (dp=2
  // x tp=2 on 4 ranks and 2 cores) pays other than the loaded fits per collective in a
  // run. The fits are timed with every pair in lock-step after a millisecond's
  // multiply; the run's own comm timers gave 0.7-1.1 ms per all-reduce of 42 KB at
  // micro-batch 1 where the fit says 1.9 ms, 2.1-2.2 ms at 165 KB where it says 2.0, and
  // 4.3-4.9 ms at 704 KB (the d384 GPT). With the tp step scale fitted at micro-batch
  // 4, which absorbed the difference there, the micro-batch-1 and -2 dp x tp layouts
  // came out 13-41% over in every bench chain. So calibrate also runs the tp reference
  // at micro-batch 1 and takes, for both tp runs, what their tp collectives took by the
  // run's own timers over what the loaded fits predict (fit_tp_scales): the profile's
  // tp_collective_scale by message size (their blocks' all-reduce, 48 and 192 KiB),
  // interpolated in log(bytes) between them, the nearest beyond. The tp step scale is
  // then the compute stretch alone.
  //
  // Two ways that failed first: one factor from the micro-batch-1 run, with the stretch
  // fitted at 4, put the waits of the larger messages into the stretch (1.86 against
  // the data-parallel 1.46), and the d384 GPT's dp x tp layouts, with 4x the compute
  // between collectives, came out 30-52% over; fitting a factor and the stretch to both
  // runs' steps gave factors of 0.54, 0.58 and 0.19 in three calibrations within an
  // hour. A tp group as large as the world is priced by the world's own fit, which runs
  // matched (4.96-5.0 ms per call measured against 5.25 predicted at tp=4), and keeps
  // it.
  //
  // Note [tensor-parallel collectives beside a pipeline]: the factors are measured on
  // the activations' all-reduces, which follow a block's long stretches of compute; a
  // factor above one is the waits those leave, and only those all-reduces take it.
  // Sequence parallelism's all-gathers and reduce-scatters, which mostly follow a
  // shard's norm, ran at or below the fits in a dp=2 x tp=2 run (0.86x and 0.57x at 197
  // KB, the norms' small all-reduces 0.44x) where the same run's all-reduces without it
  // paid 2.0-2.5x; with the factors on them the debug GPT's dp x tp sp layouts had come
  // out up to 36% over. At micro-batch 1 they ran at 0.5-0.7x (49 KB), as the
  // all-reduces' factor there (0.70x) says, and without it such a layout came out 32%
  // over: so they take a factor below one. A pipeline's pair (pp=2 x tp=2), where the
  // profile has no factor of its own for it (Note [a pipeline's tp pair in a run]),
  // takes the all-reduces' factor too, never below the fit: its other pair computes
  // beside it (1F1B's steady state), and its all-reduces measured 1.4-2.0x the fits at
  // 49-379 KB and its sp collectives 1.2-1.5x, never below, where a dp x tp pair
  // measured 0.8-1.1x at micro-batch 1. Kept to the dp x tp layouts, the factors had
  // left the 4-rank rows' pp x tp layouts 14-27% under in two bench chains; with
  // factors below one on pipelines, before the floor, pp x tp layouts at micro-batch 1
  // had come out 22-34% under. (Its sequence-parallel collectives no longer keep the
  // floor: Note [sequence-parallel collectives beside a pipeline].) The loss's three
  // small all-reduces take the activations' rule: what the run's all-reduce of their
  // bytes costs.
  auto coll = [&](const char* op, double bytes) {
    return hw.collective_seconds(op, l.tp, bytes, 0, l.ranks());
  };
  auto factor = [&](double bytes) {
    return l.tp < l.ranks() ? hw.tp_collective_scale_for(l.ranks(), bytes) : 1.0;
  };
  // Note [a pipeline's tp pair in a run]: the floor of Note [tensor-parallel collectives
  // beside a pipeline] is the loaded pair fit as it stands, and its latency is the
  // calibration's least steady figure (1.56-3.87 ms over c38's three passes, 3.1 ms as
  // fitted in c37 and c38). Priced at it, pp=2 x tp=2 layouts without sp at
  // micro-batches 1-2 came out up to 45% over (bert-debug's 1F1B at mb 2: 493.5 ms
  // priced, 341-445 measured; the debug GPT's 75% in c37), where the same layouts with
  // sp, on the dp x tp rule, priced -12% to +3%. So calibrate runs a pipeline's pair too
  // (pipeline_tp_reference: the debug GPT at pp=2 x tp=2, micro-batch 1, whose first
  // stage holds three blocks and the embedding: 52 all-reduces a step) and fits what
  // that stage's tp collectives took by rank 0's own timers as a factor on the loaded
  // all-reduce fit's latency, the bytes' share kept (48 KiB is almost all latency), for
  // that world's pipeline pairs; a profile without one keeps the floor. In c39 the
  // reference paid 135.2 ms a step (2.6 ms a call) against a fit of 2.29 ms + 0.65 GB/s:
  // 1.10x, and the three 4-rank rows, their pipeline pairs with and without sp among
  // them, leaned +0.3% to +1.1% (signed medians; c38: +0.3%, +11.4%, +12.5%), maxima
  // 14.4-20.0% (c38: 19.9-48.7%).
  const std::optional<double> pipeline_latency =
      l.pp > 1 ? hw.pipeline_tp_latency_scale_for(l.ranks()) : std::nullopt;
  auto activation_all_reduce = [&](double bytes) {
    if (pipeline_latency)
      return coll("all_reduce", bytes) + (*pipeline_latency - 1) * coll("all_reduce", 0);
    const double f = factor(bytes);
    return (l.pp > 1 ? std::max(f, 1.0) : f) * coll("all_reduce", bytes);
  };
  // Note [sequence-parallel collectives in a run]: in a dp x tp world they were priced
  // at their own loaded fit times the all-reduces' factor (capped at one), as if a
  // gather's fit moved with the all-reduce's from one calibration to the next. It does
  // not: over ten calibrations on the machine of 2026-12-07 a loaded pair's all-gather
  // latency came out 0.45-1.34x its all-reduce's, and the factor (the run's all-reduce
  // time over the all-reduce's fit: 0.35-1.20 at 48 KiB) carried the all-reduce fit's
  // moment onto the gathers. At 0.35 (an all-reduce fit of 2.81 ms, a gather's of 1.46)
  // the debug GPT's dp=2 x tp=2 sp layout at micro-batch 1 (272 all-gathers, 208
  // reduce-scatters and 241 small all-reduces a step, 0.84-0.89, 1.01-1.04 and 1.05 ms
  // each by the run's timers, where the same layout's all-reduces without sp took 1.2
  // ms) was priced 0.53, 0.67 and 0.98 ms a call and came out 35-38% under in chain
  // c27. So each now costs what the run's all-reduce of its bytes costs (the factor
  // times the all-reduce's fit: 0.99 ms there), never more than its own fit. Re-priced
  // on that profile the layout came to 24.5% under, its tp time 709 ms against about 700
  // measured; the rest lies outside the collectives' timers.
  //
  // Note [sequence-parallel collectives beside a pipeline]: a pipeline's pair priced its
  // gathers, scatters and small all-reduces at their loaded fits as they stand (the
  // floor of Note [tensor-parallel collectives beside a pipeline]), and those fits are
  // the calibration's least steady figures: a loaded pair's all-reduce latency came out
  // 1.1-3.2 ms over eight calibrations here. In a run they cost what a dp x tp pair's
  // do: the debug GPT's pp=2 x tp=2 sp layout at micro-batch 1 measured 0.83-0.91 ms
  // per all-gather, 1.22 per reduce-scatter (48 KiB) and 0.94-0.98 per small
  // all-reduce, where c29's fits said 1.70, 2.19 and 3.03 (0.51x, 0.56x and 0.32x; its
  // factor at 48 KiB was 0.43) and its 4-rank row priced the pp x tp sp layouts 32-95%
  // over. So they take the dp x tp rule. Re-priced from their profiles, the debug GPT's
  // 4-rank rows of c28, c29 and c31 went from medians of 18.3%, 16.4% and 30.4% to
  // 17.7%, 14.0% and 14.2%; bert-debug's c28 row kept its median (11.8%), and its pp x
  // tp sp layout at micro-batch 4 went from 14% to 32% under (its small all-reduces
  // 1.57 ms each in a run, priced 1.36 now and 3.16 before: the overcount had covered
  // a miss elsewhere). A pipeline's activation all-reduces, which follow a block's long
  // compute, keep the floor: the same pipeline without sp paid 1.83-1.91 ms per
  // all-reduce of 48 KiB, where the factor says 0.98 and the fit 2.85.
  auto sp_coll = [&](const char* op, double bytes) {
    if (l.tp == l.ranks()) return coll(op, bytes);
    return std::min(coll(op, bytes), factor(bytes) * coll("all_reduce", bytes));
  };
  PartCosts c;
  // A linear's forward and backward: the profile's linear-layer curve (thin shapes run
  // below a square multiply's rate), else its three multiplies; a third is forward.
  auto linear = [&](double m, double k, double n) {
    return hw.kernel_seconds("linear/" + dtype, 6 * m * k * n, 3 * mm(m, k, n)) / 3;
  };
  // A block: q/k/v, projection and the MLP's two linears (tp splits their output or
  // input features).
  const double linears = linear(N, d, 3 * d / tp) + linear(N, d / tp, d) +
                         linear(N, d, 4 * d / tp) + linear(N, 4 * d / tp, d);
  // Note [dropout costs]: dropout is element-wise work the FLOPs leave out: a mask per
  // element of the residual stream twice a block and once after the embedding, and of
  // the attention probabilities. On a CPU the model's counter-based masks hash every
  // element (compute, not traffic: the profile's "dropout" kernel), and with dropout
  // attention is written out (scores, softmax, dropout, x V; the profile's
  // "attention_dropout", the model's own core timed). Without a measured kernel a mask
  // costs its traffic: read and write forward and backward, and the mask's byte twice.
  const bool dropout = s.dropout > 0;
  const double mask_bytes = 4 * elem + 2;
  // Attention per (sequence, head) of this rank's: the fused kernel, or with dropout on
  // a CPU the written-out core. Without a measured kernel it is priced unfused: the
  // products as GEMMs and the (T, T) scores' traffic (written, masked and soft-maxed
  // forward; read and written again backward: about 14 passes), and the mask's.
  const double written_out =
      3 * 2 * mm(T, dh, T) +
      elementwise_seconds(hw, T * T * (elem * 14 + (dropout ? mask_bytes : 0)));
  const std::string attention_kernel =
      dropout && hw.device == "cpu" ? "attention_dropout/" : "attention/";
  const double attention =
      mb * heads * hw.kernel_seconds(attention_kernel + dtype, 12 * T * T * dh, written_out);
  // Forward and backward of one dropout over n elements (about even halves).
  auto drop = [&](double n) { return dropout ? kernel("dropout", n, n * mask_bytes) : 0.0; };
  // Two norms on the stream, GELU on this rank's 4d/tp, and plain element-wise work:
  // two residual adds and the heads' transpose copy (forward; backward half again).
  const double stream_norm = kernel("layer_norm", stream * d, stream * d * elem * 5);
  const double norms = 2 * stream_norm;
  const double gelu = kernel("gelu", N * 4 * d / tp, N * 4 * d / tp * elem * 5);
  const double plain = elementwise_seconds(hw, (stream * d * 6 + N * d / tp * 2) * elem);
  const double block_ops =
      ops * (kBlockOps + (l.tp > 1 ? kTpBlockOps : 0) + (dropout ? kDropoutBlockOps : 0));
  const double fb_kernels = attention + norms + gelu;  // forward + backward together
  const double stream_drops = 2 * drop(stream * d);
  c.block_forward = linears + fb_kernels / 3 + stream_drops / 2 + plain + block_ops / 2;
  c.block_backward =
      2 * linears + 2 * fb_kernels / 3 + stream_drops / 2 + 1.5 * plain + block_ops / 2;
  if (l.recompute == "full") c.block_recompute = c.block_forward;
  if (l.recompute == "selective") c.block_recompute = attention / 3 + ops * 2;
  // Tensor parallel, per block: two all-reduces of the activations in forward and two
  // in backward. Sequence parallel splits each into an all-gather and a reduce-scatter
  // and does more of them: forward gathers before the two column linears and
  // reduce-scatters after the two row linears; backward gathers the inputs again
  // (Megatron's linear keeps only its shard), reduce-scatters their gradients and
  // gathers the rows' gradients; and the six replicated parameters (two norms' weight
  // and bias, two row biases) sum their gradients over the ranks' positions.
  //
  // Note [recompute's collectives]: full recompute replays a block's forward, and only
  // the forward's collectives: two all-reduces, or under sequence parallelism two
  // all-gathers and two reduce-scatters. Taken as half the block's collectives, it
  // priced sequence-parallel layouts one all-gather and three small all-reduces too
  // high per block and micro-batch: the debug GPT at tp=4, micro-batch 4, measured 136
  // all-gathers, 104 reduce-scatters and 121 small all-reduces a step with full
  // recompute (32, 32 and 0 more than without), 1.53-1.56 s in them where 1.88 was
  // predicted; over five bench chains its sequence-parallel tp=4 layouts came out a
  // median 15% over against the machine's speed at each run (-2% without sp).
  if (l.tp > 1) {
    const double bytes = N * d * elem;
    if (l.sequence_parallel) {
      const double gather = sp_coll("all_gather", bytes),
                   scatter = sp_coll("reduce_scatter", bytes);
      c.block_tp_comm = 6 * gather + 4 * scatter + 6 * sp_coll("all_reduce", d * 4);
      c.block_tp_forward = 2 * gather + 2 * scatter;
    } else {
      c.block_tp_comm = 4 * activation_all_reduce(bytes);
      c.block_tp_forward = c.block_tp_comm / 2;
    }
  }
  // The first stage: token and position lookups (BERT: types and a norm); backward
  // writes the tables' gradients (zeroed, then rows added).
  const double V = static_cast<double>(s.padded_vocab(l.tp)) / tp;
  const double embed_bytes = N * d * elem * (bert ? 5 : 3);
  const double embed_norm = bert ? stream_norm : 0;
  const double embed_drop = drop(stream * d);
  c.first_forward =
      elementwise_seconds(hw, embed_bytes) + ops * kEmbedOps / 2 + embed_norm / 3 + embed_drop / 2;
  c.first_backward = elementwise_seconds(hw, embed_bytes + (V + T) * d * 4 * 2) +
                     ops * kEmbedOps / 2 + 2 * embed_norm / 3 + embed_drop / 2;
  // The last stage: final norm (BERT: the MLM transform's dense, GELU and norm), the
  // vocabulary GEMM and the fp32 cross-entropy over this rank's vocabulary slice.
  const double head_mm = linear(N, d, V) + (bert ? linear(N, d, d) : 0);
  const double head_kernels =
      kernel("layer_norm", N * d, N * d * elem * 5) * (bert ? 2 : 1) +
      (bert ? kernel("gelu", N * d, N * d * elem * 5) : 0) +
      hw.kernel_seconds("cross_entropy", N * V, elementwise_seconds(hw, N * V * 4 * 8));
  const double head_ops = ops * ((bert ? kBertHeadOps : kGptHeadOps) + (l.tp > 1 ? kTpHeadOps : 0));
  c.last_forward = head_mm + head_kernels / 3 + head_ops / 2;
  c.last_backward = 2 * head_mm + 2 * head_kernels / 3 + head_ops / 2;
  // Vocabulary-parallel ends: the embedding's all-reduce (SP: reduce-scatter, and an
  // all-gather back), the head input's backward all-reduce (SP: all-gather and
  // reduce-scatter), the replicated norms' and positions' gradients under SP, and the
  // loss's three small all-reduces of a value per position.
  if (l.tp > 1) {
    const double bytes = N * d * elem;
    // Forward: the embedding's reduction (SP: its reduce-scatter), the head input's
    // gather under SP (without SP its all-reduce is backward) and the loss's three.
    if (l.sequence_parallel) {
      const double small = sp_coll("all_reduce", d * 4), loss = 3 * sp_coll("all_reduce", N * 4);
      c.first_tp_forward = sp_coll("reduce_scatter", bytes);
      c.first_tp_comm = c.first_tp_forward + sp_coll("all_gather", bytes) + small * (bert ? 3 : 1);
      c.last_tp_forward = sp_coll("all_gather", bytes) + loss;
      c.last_tp_comm =
          c.last_tp_forward + sp_coll("reduce_scatter", bytes) + small * (bert ? 4 : 2);
    } else {
      const double loss = 3 * activation_all_reduce(N * 4);
      c.first_tp_comm = c.first_tp_forward = activation_all_reduce(bytes);
      c.last_tp_forward = loss;
      c.last_tp_comm = loss + activation_all_reduce(bytes);
    }
  }
  if (const auto it = o.part_scale.find(l.micro_batch); it != o.part_scale.end()) {
    const PartScale& k = it->second;
    c.block_forward *= k.block, c.block_backward *= k.block, c.block_recompute *= k.block;
    c.first_forward *= k.first, c.first_backward *= k.first;
    c.last_forward *= k.last, c.last_backward *= k.last;
  }
  return c;
}

CostOptions cost_options(const Config& cfg, const HardwareProfile& hw) {
  CostOptions o;
  o.precision = cfg.memory.precision;
  o.batch = cfg.training.batch_size;
  o.overlap = hw.backend == "nccl" ? 0.9 : 0.0;  // Gloo on CPU: comm threads need the cores
  o.first_bucket_bytes = cfg.parallel.first_bucket_mb * (1 << 20);
  o.bucket_cap_bytes = cfg.parallel.bucket_cap_mb * (1 << 20);
  return o;
}

std::vector<double> ddp_bucket_bytes(double grad_bytes, double first_cap, double cap) {
  STRATA_CHECK(first_cap > 0 && cap > 0, "DDP's bucket caps must be positive (got ", first_cap,
               " and ", cap, " bytes)");
  std::vector<double> out;
  double left = grad_bytes;
  for (double c = first_cap; left > 0; c = cap) {
    out.push_back(std::min(left, c));
    left -= out.back();
  }
  return out;
}

bool takes_zero_collective_scale(const Layout& l) {
  return l.zero > 0 && l.dp == l.ranks();
}

namespace {
// Each virtual stage's work per micro-batch, in schedule order (stage v: chunk v / pp of
// pipeline rank v % pp).
struct VirtualStages {
  std::vector<double> forward, backward, recompute, tp_comm, tp_forward, recompute_tp_comm;
  // A pipeline rank's tensor-parallel collectives a step: its chunks' over m micro-batches.
  double rank_tp_comm(const Layout& l, int64_t m, int64_t rank) const {
    double out = 0;
    for (int64_t chunk = 0; chunk < l.pp_virtual; ++chunk) {
      const auto v = static_cast<size_t>(chunk * l.pp + rank);
      out += static_cast<double>(m) * (tp_comm[v] + recompute_tp_comm[v]);
    }
    return out;
  }
};
VirtualStages virtual_stages(const ModelSpec& s, const Layout& l, const PartCosts& c) {
  const int64_t stages = l.pp * l.pp_virtual;
  std::vector<int64_t> blocks(1, s.n_layer);
  if (stages > 1) blocks = stage_partition(s, "auto", stages, l.pp_virtual);
  VirtualStages out;
  for (int64_t v = 0; v < stages; ++v) {
    const auto nb = static_cast<double>(blocks[static_cast<size_t>(v)]);
    double f = nb * c.block_forward, bw = nb * c.block_backward, comm = nb * c.block_tp_comm,
           comm_f = nb * c.block_tp_forward;
    if (v == 0)
      f += c.first_forward, bw += c.first_backward, comm += c.first_tp_comm,
          comm_f += c.first_tp_forward;
    if (v == stages - 1)
      f += c.last_forward, bw += c.last_backward, comm += c.last_tp_comm,
          comm_f += c.last_tp_forward;
    out.forward.push_back(f);
    out.backward.push_back(bw);
    out.recompute.push_back(nb * c.block_recompute);
    out.tp_comm.push_back(comm);
    out.tp_forward.push_back(comm_f);
    // Full recompute replays the blocks' forward, its tensor-parallel collectives too
    // (Note [recompute's collectives]).
    out.recompute_tp_comm.push_back(l.recompute == "full" ? nb * c.block_tp_forward : 0);
  }
  return out;
}
int64_t micro_batches_per_step(const Layout& l, const CostOptions& o) {
  const int64_t m = o.batch / (l.micro_batch * l.dp);
  STRATA_CHECK(m >= 1, "the batch ", o.batch, " does not fill one micro-batch of ", l.micro_batch,
               " on each of ", l.dp, " replicas");
  return m;
}
}  // namespace

double stage_tp_comm_seconds(const ModelSpec& s, const Layout& l, const CostOptions& o,
                             const HardwareProfile& hw, int64_t stage) {
  STRATA_CHECK(stage >= 0 && stage < l.pp, "pipeline rank ", stage, " is not one of ", l.pp);
  const int64_t m = micro_batches_per_step(l, o);
  return virtual_stages(s, l, predict_parts(s, l, o, hw)).rank_tp_comm(l, m, stage);
}

StepPrediction predict_step(const ModelSpec& s, const Layout& l, const CostOptions& o,
                            const HardwareProfile& hw) {
  STRATA_CHECK(is_language_model(s.family), "the cost model covers GPT and BERT flavours; ",
               s.flavour, " is not one");
  const Precision prec = precision_of(o, hw);
  const double elem = prec.elem;
  const double T = static_cast<double>(s.seq_len), d = static_cast<double>(s.d_model);
  const double N = static_cast<double>(l.micro_batch) * T, tp = static_cast<double>(l.tp);
  const int64_t m = micro_batches_per_step(l, o);
  const PartCosts c = predict_parts(s, l, o, hw);
  const double world = static_cast<double>(l.ranks());
  const VirtualStages vs = virtual_stages(s, l, c);
  const auto& fwd1 = vs.forward;
  const auto& bwd1 = vs.backward;
  const auto& rec1 = vs.recompute;
  const auto& tpc = vs.tp_comm;
  const auto& tpf = vs.tp_forward;
  const auto& rtc = vs.recompute_tp_comm;
  // Pipeline neighbours are dp x tp ranks apart (Note [rank grid]).
  const double p2p = l.pp > 1 ? hw.collective_seconds("send_recv", 2,
                                                      N * d * elem / (l.sequence_parallel ? tp : 1),
                                                      l.dp * l.tp + 1, l.ranks())
                              : 0;
  // Each action: its compute at full speed, then its collectives or transfer.
  const ActionWorkFn work = [&](int64_t rank, const Action& a) -> ActionWork {
    const auto v = static_cast<size_t>(a.chunk * l.pp + rank);
    switch (a.type) {
      case ActionType::kForward:
        return {fwd1[v], tpf[v]};
      case ActionType::kBackward:
        return {bwd1[v] + rec1[v], tpc[v] - tpf[v] + rtc[v]};
      case ActionType::kBackwardInput:
        return {bwd1[v] / 2 + rec1[v], tpc[v] - tpf[v] + rtc[v]};
      case ActionType::kBackwardWeight:
        return {bwd1[v] / 2, 0};
      case ActionType::kSendActivation:
      case ActionType::kSendGrad:
        return {0, p2p};
      default:
        return {};
    }
  };
  const auto schedule =
      l.pp == 1 && l.pp_virtual == 1
          ? single_stage_schedule(m)
          : pipeline_schedule(parse_schedule_kind(l.schedule), l.pp, m, l.pp_virtual);
  // What the kernels leave out of compute, measured on a reference run (Note [step
  // calibration]): the trainer's own work stretches compute, not the collectives (those
  // are calibrated inside a step already). On a CPU, with the contention, as one
  // slowdown of the ranks computing (Note [contention]).
  const bool cpu = hw.device == "cpu";
  const bool tp_layout = l.tp > 1;
  const double slowdown =
      cpu ? hw.compute_slowdown(world, tp_layout) : hw.step_scale_for(l.ranks(), tp_layout);
  // A CPU pipeline's ranks share the cores, and how many compute changes through the
  // step (Note [shared-machine simulation]): each stage's dp x tp ranks compute
  // together, and a rank waiting in a receive or a collective takes a share of a
  // computing one's load. Before, one slowdown for the whole step (that of the ranks
  // computing on average, a waiting one at half) priced GPipe with one or two
  // micro-batches 61-63% above measurement (one stage computes at a time: no
  // contention) while 1F1B's steady state (all compute) came out below it.
  //
  // Note [waiting ranks' load]: a wait costs its rank CPU for about its first moments
  // (Gloo's threads waking and polling), then sleeps, so the share is that cost over a
  // wait's length. Taken as the mean forward-or-backward action, that length priced a
  // pipeline with one slow stage (the debug GPT's 4 stages of one block, the last with
  // the head: about 8.5 ms a micro-batch against 1.5 ms for the others) 70-75% over:
  // the three fast stages wait through the slow one's actions, so they are far from
  // computing 0.6 of the time. So the schedule is simulated twice: first with the mean
  // action, then with the first simulation's mean wait (its ranks' idle gaps between
  // actions); that layout went to 21-27% over, balanced pipelines moved by 0-6%. A
  // fixed share of 0.25 had priced the d384 GPT's pipelines, whose actions last 30-130
  // ms, 15-32% over; a 1 ms wait cost is a share of 0.01-0.03 there.
  constexpr double kWaitCost = 1e-3;
  double mean_action = 0;
  for (size_t v = 0; v < fwd1.size(); ++v) mean_action += (fwd1[v] + bwd1[v]) / 2;
  mean_action /= static_cast<double>(fwd1.size());
  const bool shared = cpu && l.pp > 1;
  const double lockstep = static_cast<double>(l.dp * l.tp);
  auto shared_run = [&](double wait) {
    const double waiting_load = std::min(1.0, kWaitCost / std::max(wait, 1e-12));
    return simulate_shared(schedule, work, [&](double computing) {
      const double busy = computing * lockstep;
      return hw.compute_slowdown(busy + waiting_load * (world - busy), tp_layout);
    });
  };
  Simulation sim;
  if (shared) {
    sim = shared_run(mean_action);
    const double wait = mean_wait(sim);
    if (wait > 0) sim = shared_run(wait);
  } else {
    sim = simulate_schedule(schedule, [&](int64_t rank, const Action& a) {
      const ActionWork w = work(rank, a);
      return slowdown * w.compute + w.fixed;
    });
  }
  STRATA_CHECK(sim.error.empty(), "the schedule deadlocks: ", sim.error);

  StepPrediction p;
  // The busiest rank's shares.
  int64_t busiest = 0;
  for (int64_t r = 0; r < l.pp; ++r)
    if (sim.busy[static_cast<size_t>(r)] > sim.busy[static_cast<size_t>(busiest)]) busiest = r;
  double full_speed = 0, recompute = 0;  // its compute and recompute per step, unscaled
  for (int64_t chunk = 0; chunk < l.pp_virtual; ++chunk) {
    const auto v = static_cast<size_t>(chunk * l.pp + busiest);
    full_speed += static_cast<double>(m) * (fwd1[v] + bwd1[v]);
    recompute += static_cast<double>(m) * rec1[v];
  }
  p.tp_comm_s = vs.rank_tp_comm(l, m, busiest);
  // Shared: the busiest rank's average slowdown over the step prices its parts.
  double scale = slowdown;
  if (shared && full_speed + recompute > 0)
    scale = (sim.busy[static_cast<size_t>(busiest)] - p.tp_comm_s) / (full_speed + recompute);
  p.compute_s = scale * full_speed;
  p.recompute_s = scale * recompute;
  p.bubble_s = std::max(0.0, sim.step_time - sim.busy[static_cast<size_t>(busiest)]);

  // Data parallel: this rank's parameters and gradients.
  const ParameterCount pc = count_parameters(s, l.tp);
  const double params = static_cast<double>(pc.trainable) / static_cast<double>(l.pp);
  const double grad_bytes = params * elem, dp = static_cast<double>(l.dp);
  const double last_backward = scale * bwd1.back();
  auto hidden = [&](double comm, double behind) {
    return std::max(comm - o.overlap * behind, (1 - o.overlap) * comm);
  };
  // A dp group spans dp x tp ranks (Note [rank grid]).
  auto dp_coll = [&](const char* op, double bytes) {
    return hw.collective_seconds(op, l.dp, bytes, l.dp * l.tp, l.ranks());
  };
  // ZeRO's units: this stage's blocks and the root (embeddings, norms, head; on a
  // pipeline, the end stage's).
  const double unit = static_cast<double>(pc.per_block) * elem;
  const double root =
      static_cast<double>(l.pp > 1 ? std::max(pc.first_stage, pc.last_stage + pc.tied_copy)
                                   : pc.outside_blocks) *
      elem;
  const double blocks_here = static_cast<double>(s.n_layer) / static_cast<double>(l.pp);
  const double mb = static_cast<double>(m);
  // Note [a pipeline's ZeRO root]: on a pipeline ZeRO reduces the root unit once a
  // step, in finalize, after the tied embeddings' exchange (Note [pipeline tied
  // gradients under ZeRO]), so ZeRO-2's reductions and their copies every micro-batch
  // cover the stage's blocks only. Priced on all of the stage's parameters every
  // micro-batch, the debug GPT's pp=2 1F1B ZeRO-2 layout at micro-batch 1 (16 a step)
  // came out 35-37% over its runs: there ZeRO-2 ran within the noise of ZeRO-0 (four
  // runs each: 228-270 ms against 236-256), while one rank without a pipeline pays
  // about 40 ms for it (fastest of five: 208 against 168 ms). Now priced at 10 ms.
  const bool root_once = l.pp > 1 && l.zero == 2;
  if (l.dp > 1) {
    if (l.zero == 0) {
      // Note [DDP's buckets priced as issued]: DDP all-reduces its gradients bucket by
      // bucket as backward fills them, each its own collective with its own latency.
      // Priced before as one all-reduce of all the gradients, a step paid one latency
      // where it pays one per bucket: on a machine whose 4-rank all-reduce fit has 7.5
      // ms of latency, the debug GPT's two buckets (1 MiB, then the rest) at dp=4 were
      // priced 13.6 ms against 22-24 ms of them exposed in the run (DDP's own timers,
      // what ran after backward's computation ended), the d384 GPT's four 92 ms
      // against 98-106. The calibration fits its step scale on the reference with the
      // priced dp time subtracted (Note [step calibration]), so what the one latency
      // left out became a factor on compute; but it is a small part of what a 4-rank
      // step carries beyond the model: re-priced on the same runs, each bench row's
      // signed median moved by at most 0.4 points.
      double comm = 0;
      for (const double b : ddp_bucket_bytes(grad_bytes, o.first_bucket_bytes, o.bucket_cap_bytes))
        comm += dp_coll("all_reduce", b);
      p.dp_exposed_s = hidden(comm, last_backward);
    } else {
      // Note [ZeRO collectives priced as issued]: ZeRO reduces and gathers unit by
      // unit (each of this stage's blocks, then the root: embeddings, norms, head; on
      // a pipeline, the end stage's), each its own collective, and on Gloo a unit's
      // reduction is an all-reduce (Note [Gloo reductions]). Priced before as one
      // reduce-scatter of all the gradients, a step paid one latency where it pays
      // one per unit: ZeRO-2 at dp=2 came out 13-18% under measurement.
      const char* reduce = hw.backend == "gloo" ? "all_reduce" : "reduce_scatter";
      const double zf =
          takes_zero_collective_scale(l) ? hw.zero_collective_scale_for(l.ranks()) : 1.0;
      auto zero_coll = [&](const char* op, double bytes) { return zf * dp_coll(op, bytes); };
      auto every_unit = [&](const char* op) {
        return blocks_here * zero_coll(op, unit) + zero_coll(op, root);
      };
      if (l.zero <= 2) {
        // Stage 1 reduces after the last micro-batch only, stage 2 after each (on a
        // pipeline its blocks only: Note [a pipeline's ZeRO root]); both gather the
        // updated shards unit by unit after the optimizer's step.
        const double times = l.zero == 2 ? mb : 1.0, root_times = root_once ? 1.0 : times;
        const double reduces =
            times * blocks_here * zero_coll(reduce, unit) + root_times * zero_coll(reduce, root);
        p.dp_exposed_s = hidden(reduces, times * last_backward) + every_unit("all_gather");
      } else {
        // ZeRO-3: per block and micro-batch, gathers in forward and backward (a
        // recomputed forward's gather serves its backward) and a reduction, behind the
        // block's compute by prefetch; the root gathered before each micro-batch's
        // forward and reduced after its backward (Note [ZeRO]).
        const double comm =
            mb * (every_unit(reduce) + 2 * blocks_here * zero_coll("all_gather", unit) +
                  zero_coll("all_gather", root));
        p.dp_exposed_s = hidden(comm, p.compute_s);
      }
    }
  }
  if (l.zero > 0) {
    // Note [ZeRO's copies]: around its collectives ZeRO moves memory on the ranks'
    // compute, at dp=1 too (a group of one skips the collective, not the copies). A
    // reduction zeroes a flat buffer, copies the gradients in and divides it (5 passes
    // over the unit's bytes), then adds this rank's shard into its gradient (3 over
    // the shard); a gather over one rank copies the shard out (2). Stage 1 reduces once
    // a step and divides in place; stages 1-2 gather once, after the optimizer; stage
    // 3 reduces every micro-batch and gathers every block twice (forward and backward)
    // and the root once. At one rank, micro-batch 1 (16 a step), ZeRO-2 and ZeRO-3
    // measured 63 and 77 ms above plain training's 283 ms step, then priced at nothing;
    // these passes price them at 66 and 85 ms.
    const double bytes = params * elem, shard_bytes = bytes / dp;
    const double gather = l.dp == 1 ? 2 * bytes : 0;  // Comm's group-of-one copy
    const double block_bytes = std::min(blocks_here * unit, bytes);
    // One reduction's passes over `b` of the stage's gradient bytes.
    auto reduction = [&](double b) { return 5 * b + 3 * b / dp; };
    double traffic = 0;
    if (l.zero == 1) {
      traffic = 2 * bytes + 2 * shard_bytes + 2 * shard_bytes + gather;
    } else if (l.zero == 2) {
      // Reduced every micro-batch: the stage's blocks on a pipeline, else everything.
      const double each = root_once ? block_bytes : bytes;
      traffic = mb * reduction(each) + reduction(bytes - each) + 2 * shard_bytes + gather;
    } else {
      const double blocks_share = block_bytes / std::max(bytes, 1e-30);
      traffic = mb * (reduction(bytes) + gather * (1 + blocks_share));
    }
    p.dp_exposed_s += slowdown * elementwise_seconds(hw, traffic);
  }
  // Note [the tied exchange's time]: a pipeline's two ends sum their tied embedding's
  // gradients once a step, after both have run their last backward
  // (PipelineGradSync::exchange_tied): each copies its .grad, sends the copy and
  // receives the other's at once, then adds it in. Nothing computes beside it, so all of
  // it is exposed: the two directions as two transfers (the ranks' copies share the
  // cores) and the copy and the add (5 passes over the tied weight's gradient). It was
  // unpriced: 3 MB each way for the debug GPT and BERT-debug, 12.6 MB for the d384 GPT.
  const int64_t ends_span = (l.pp - 1) * l.dp * l.tp + 1;  // first to last stage (Note [rank grid])
  if (l.pp > 1 && pc.tied_copy > 0) {
    const double tied = static_cast<double>(pc.tied_copy) * elem;
    p.dp_exposed_s += 2 * hw.collective_seconds("send_recv", 2, tied, ends_span, l.ranks()) +
                      slowdown * elementwise_seconds(hw, 5 * tied);
  }
  // Note [a step's small collectives]: after its schedule a step sums the gradient
  // norm's square over each axis whose ranks hold different gradients (pp; tp; dp under
  // ZeRO) and, on a pipeline, broadcasts the loss from the last stage: one scalar each,
  // so each costs its group's latency, with nothing to hide behind. The loss's mean over
  // dp is left out: the calibration's reference (data-parallel, ZeRO-0) runs it, so its
  // step scale carries it already.
  auto scalar = [&](int64_t group, int64_t span) {
    return hw.collective_seconds("all_reduce", group, 8, span, l.ranks());
  };
  if (l.pp > 1) p.dp_exposed_s += 2 * scalar(l.pp, ends_span);
  if (l.tp > 1) p.dp_exposed_s += scalar(l.tp, l.tp);
  if (l.zero > 0 && l.dp > 1) p.dp_exposed_s += scalar(l.dp, l.dp * l.tp);
  const double shard = l.zero > 0 ? params / dp : params;
  // AdamW's update (the profile's kernel, else its traffic: parameter, gradient and two
  // moments read, three written, plus the half copy with master weights), the gradient
  // norm's read and the gradients' zeroing.
  p.optimizer_s =
      slowdown * (hw.kernel_seconds("adamw", shard,
                                    elementwise_seconds(hw, shard * (28 + (prec.half ? 4 : 0)))) +
                  elementwise_seconds(hw, params * elem * 2));
  if (l.offload && hw.host_to_device_bytes_per_s > 0)
    p.offload_s =
        shard * elem / hw.device_to_host_bytes_per_s + shard * elem / hw.host_to_device_bytes_per_s;
  p.step_s = sim.step_time + p.dp_exposed_s + p.optimizer_s + p.offload_s;
  for (double* t : {&p.step_s, &p.compute_s, &p.recompute_s, &p.tp_comm_s, &p.bubble_s,
                    &p.dp_exposed_s, &p.optimizer_s, &p.offload_s})
    *t *= o.speed;
  p.tokens_per_s = static_cast<double>(o.batch) * T / p.step_s;
  const double peak = hw.peak_flops(prec.dtype);
  const double flops_per_token = transformer_flops_per_token(s);
  p.mfu = peak > 0 ? flops_per_token * p.tokens_per_s / (world * peak) : 0;
  return p;
}

}  // namespace strata
