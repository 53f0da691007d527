#include "strata/plan/estimator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include <c10/util/StringUtil.h>

#include "strata/core/errors.h"
#include "strata/memory/multi_tensor.h"
#include "strata/parallel/pipeline/partition.h"
#include "strata/parallel/pipeline/schedule.h"

namespace strata {

namespace {

int64_t linear(int64_t in, int64_t out, bool bias = true) {
  return in * out + (bias ? out : 0);
}
int64_t layer_norm(int64_t d) {
  return 2 * d;
}
// Pre-LN GPT and post-LN BERT blocks hold the same tensors: two layer norms, the
// fused qkv and output projections, and the 4x MLP. A tp rank holds 1/tp of the
// column-parallel linears (qkv, fc) and of the row-parallel weights; the layer norms
// and the row-parallel biases whole.
int64_t transformer_block(int64_t d, int64_t tp) {
  const int64_t sharded = linear(d, 3 * d) + d * d + linear(d, 4 * d) + 4 * d * d;
  return sharded / tp + 2 * layer_norm(d) + 2 * d;
}
int64_t conv(int64_t in, int64_t out, int64_t k) {
  return in * out * k * k;  // no bias: BatchNorm follows
}
int64_t batch_norm(int64_t c) {
  return 2 * c;  // weight and bias; the running statistics are buffers
}

}  // namespace

ParameterCount count_parameters(const ModelSpec& s, int64_t tp) {
  STRATA_CHECK(tp == 1 || s.family == Family::kGpt || s.family == Family::kBert, "tp=", tp, ": ",
               s.flavour, " has no tensor-parallel layout (only GPT and ",
               "BERT do); use parallel.tp=1");
  STRATA_CHECK(s.family != Family::kCustom, "the estimator has no formulas for ", s.flavour,
               ", a program's own model");
  ParameterCount c;
  switch (s.family) {
    case Family::kGpt: {
      const int64_t d = s.d_model;
      c.per_block = transformer_block(d, tp);
      // Vocab-parallel embedding and head (Note [vocab padding]); positions and ln_f whole.
      const int64_t v = s.padded_vocab(tp) / tp;
      c.first_stage = v * d + s.seq_len * d;
      c.last_stage = layer_norm(d) + (s.tied_embedding ? 0 : linear(d, v, /*bias=*/false));
      c.tied_copy = s.tied_embedding ? v * d : 0;
      c.outside_blocks = c.first_stage + c.last_stage;
      c.total = c.outside_blocks + s.n_layer * c.per_block;
      c.trainable = c.total;
      break;
    }
    case Family::kBert: {
      const int64_t d = s.d_model;
      c.per_block = transformer_block(d, tp);
      // Vocab-parallel word embedding and MLM bias; everything else whole on each rank.
      const int64_t pooler = linear(d, d);
      const int64_t v = s.padded_vocab(tp) / tp;
      c.first_stage = (v + s.seq_len + s.type_vocab) * d + layer_norm(d);
      c.last_stage = pooler + linear(d, d) + layer_norm(d) + v;
      c.tied_copy = v * d;
      c.outside_blocks = c.first_stage + c.last_stage;
      c.total = c.outside_blocks + s.n_layer * c.per_block;
      c.trainable = c.total - pooler;  // frozen: next-sentence prediction is not trained
      break;
    }
    case Family::kResNet: {
      const bool small_stem = s.image_size < 64;
      c.outside_blocks = conv(s.in_channels, 64, small_stem ? 3 : 7) + batch_norm(64);
      int64_t in = 64;
      c.total = c.outside_blocks;
      for (size_t stage = 0; stage < s.resnet_layers.size(); ++stage) {
        const int64_t w = 64 << stage;
        for (int64_t i = 0; i < s.resnet_layers[stage]; ++i) {
          const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
          const int64_t out = s.bottleneck ? 4 * w : w;
          int64_t b = s.bottleneck ? conv(in, w, 1) + batch_norm(w) + conv(w, w, 3) +
                                         batch_norm(w) + conv(w, out, 1) + batch_norm(out)
                                   : conv(in, w, 3) + batch_norm(w) + conv(w, w, 3) + batch_norm(w);
          if (stride != 1 || in != out) b += conv(in, out, 1) + batch_norm(out);
          c.per_block = std::max(c.per_block, b);
          c.total += b;
          in = out;
        }
      }
      c.outside_blocks += linear(in, s.num_classes);
      c.total += linear(in, s.num_classes);
      c.trainable = c.total;
      break;
    }
    case Family::kMlp: {
      const int64_t h = s.hidden;
      c.per_block = linear(h, h);
      c.outside_blocks =
          linear(s.in_channels * s.image_size * s.image_size, h) + linear(h, s.num_classes);
      c.total = c.outside_blocks + s.n_layer * c.per_block;
      c.trainable = c.total;
      break;
    }
    case Family::kCustom:
      break;
  }
  return c;
}

ModelStateBytes model_state_bytes(int64_t total, int64_t trainable, const StateLayout& l) {
  STRATA_CHECK(l.zero >= 0 && l.zero <= 3, "parallel.zero=", l.zero,
               " is not a ZeRO stage; choose 0 (plain DDP), 1, 2 or 3");
  STRATA_CHECK(l.dp >= 1, "dp=", l.dp, " must be at least 1");
  const auto psi = static_cast<double>(trainable);
  const auto frozen = static_cast<double>(total - trainable);
  const auto n = static_cast<double>(l.dp);
  const auto p = static_cast<double>(l.param_bytes);
  // fp32 moments, and an fp32 master when parameters are half.
  const double opt = 8.0 + (l.master_weights && l.param_bytes < 4 ? 4.0 : 0.0);
  ModelStateBytes b;
  b.parameters = (l.zero >= 3 ? p * psi / n : p * psi) + p * frozen;
  b.gradients = l.zero >= 2 ? p * psi / n : p * psi;
  if (l.zero >= 1 && l.offload) {
    // Strata's offload keeps an fp32 copy and an fp32 gradient buffer of each shard
    // element on the host besides the moments; at stage 3 the host copy is the
    // only copy of the parameters.
    b.host_optimizer = (4.0 + 4.0 + 8.0) * psi / n;
    if (l.zero >= 3) b.parameters = p * frozen;
  } else {
    b.optimizer = l.zero >= 1 ? opt * psi / n : opt * psi;
  }
  return b;
}

double korthikanti_layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a) {
  const auto sd = static_cast<double>(s), hd = static_cast<double>(h);
  return sd * static_cast<double>(b) * hd * (34.0 + 5.0 * static_cast<double>(a) * sd / hd);
}

}  // namespace strata

namespace strata {

double EstimatePoint::total() const {
  double t = 0;
  for (double b : bytes) t += b;
  return t;
}

namespace {

constexpr size_t kParams = static_cast<size_t>(Category::kParameters);
constexpr size_t kGrads = static_cast<size_t>(Category::kGradients);
constexpr size_t kOpt = static_cast<size_t>(Category::kOptimizer);
constexpr size_t kActs = static_cast<size_t>(Category::kActivations);
constexpr size_t kComm = static_cast<size_t>(Category::kCommBuffers);
constexpr size_t kOtherCat = static_cast<size_t>(Category::kOther);

// Note [estimated step]: the estimate replays one step at the granularity of the
// memory timeline: a level per category, changed as tensors are made and freed,
// and marks (phase points) where the timeline samples, plus points for the
// transients inside a phase (a block's backward, the head's backward, the
// optimizer's update, a collective's staging buffer) that the timeline cannot
// see but the allocator's peak does.
class StepReplay {
 public:
  std::array<double, kNumCategories> level{};
  std::vector<EstimatePoint> points;

  void mark(const std::string& phase, double extra_acts = 0, double extra_comm = 0,
            double extra_opt = 0) {
    EstimatePoint p{phase, level};
    p.bytes[kActs] += extra_acts;
    p.bytes[kComm] += extra_comm;
    p.bytes[kOpt] += extra_opt;
    points.push_back(std::move(p));
  }
};

struct ZeroUnits {
  double block = 0, root = 0;  // gathered bytes of the largest block unit and the root
  double root_grads = 0;       // the root's gradients other than a tied embedding's
  double largest_group = 0;    // largest flat group (padded), parameter dtype
  double second_group = 0;     // the next largest: two all-gathers are in flight at once
};

// Elements of the model's largest parameter tensor.
double largest_tensor(const ModelSpec& s) {
  switch (s.family) {
    case Family::kGpt:
    case Family::kBert:
      return static_cast<double>(std::max(4 * s.d_model * s.d_model, s.padded_vocab() * s.d_model));
    case Family::kResNet: {
      const int64_t w = 64 << (s.resnet_layers.size() - 1);  // the last stage's 3x3 convolution
      return static_cast<double>(w * w * 9);
    }
    case Family::kMlp:
      return static_cast<double>(
          std::max(s.hidden * s.hidden, s.in_channels * s.image_size * s.image_size * s.hidden));
    case Family::kCustom:
      break;
  }
  return 0;
}

}  // namespace

namespace {
// One stage's estimate (in.stage; 0 without a pipeline). `schedule`: the pipeline
// schedule's check, every rank's (null without a pipeline).
MemoryEstimate estimate_stage(const EstimateInput& in, const ScheduleCheck* schedule) {
  const ModelSpec& spec = in.spec;
  STRATA_CHECK(in.micro_batch >= 1 && in.micro_batches >= 1, "micro_batch=", in.micro_batch,
               " and micro_batches=", in.micro_batches, " must be at least 1");
  STRATA_CHECK(in.tp >= 1 && in.pp >= 1 && in.dp >= 1, "dp, tp and pp must be at least 1");
  MemoryEstimate e;
  const bool half = in.precision != "fp32";
  const int64_t p_bytes = half && in.master_weights ? 2 : 4;
  const int64_t a_bytes = half ? 2 : 4;
  e.count = count_parameters(spec);
  e.rank_count = count_parameters(spec, in.tp);
  const ParameterCount& rc = e.rank_count;

  // Tensor and pipeline parallel shard the model before data parallelism does:
  // tp splits the blocks' matrices and the vocabulary (rc is a tp rank's), pp
  // gives each stage ceil(L / pp) blocks (stage 0 also the embeddings; it is the
  // estimate's rank).
  const int64_t layers = std::max<int64_t>(
      1, spec.family == Family::kResNet
             ? std::accumulate(spec.resnet_layers.begin(), spec.resnet_layers.end(), int64_t{0})
             : spec.n_layer);
  // Note [estimated pipeline stages]: pp rank s holds virtual stages s, s+p, ...
  const int64_t stage = std::max<int64_t>(in.stage, 0);
  e.stage = stage;
  const bool first_stage = stage == 0, last_stage = stage == in.pp - 1;
  int64_t stage_layers = (layers + in.pp - 1) / in.pp;
  // The rank's chunks' blocks, in chunk order (one chunk without interleaving).
  std::vector<int64_t> chunk_blocks;
  const int64_t virtual_stages = in.pp * std::max<int64_t>(1, in.pp_virtual);
  if (in.pp > 1 && in.pp_virtual > 1 && in.stage_blocks.empty() && layers >= virtual_stages) {
    const std::vector<int64_t> parts = uniform_partition(layers, virtual_stages);
    for (auto vs = static_cast<size_t>(stage); vs < parts.size(); vs += static_cast<size_t>(in.pp))
      chunk_blocks.push_back(parts[vs]);
    stage_layers = std::accumulate(chunk_blocks.begin(), chunk_blocks.end(), int64_t{0});
  }
  if (in.pp > 1 && !in.stage_blocks.empty()) {
    stage_layers = 0;
    for (size_t vs = static_cast<size_t>(stage); vs < in.stage_blocks.size();
         vs += static_cast<size_t>(in.pp)) {
      stage_layers += in.stage_blocks[vs];
      chunk_blocks.push_back(in.stage_blocks[vs]);
    }
  }
  const double blocks_params = static_cast<double>(rc.total - rc.outside_blocks);
  // This stage's share of what lies outside the blocks (all of it without a pipeline).
  const double outside = in.pp == 1
                             ? static_cast<double>(rc.outside_blocks)
                             : static_cast<double>((first_stage ? rc.first_stage : 0) +
                                                   (last_stage ? rc.last_stage + rc.tied_copy : 0));
  double rank_total =
      outside + blocks_params * static_cast<double>(stage_layers) / static_cast<double>(layers);
  // Frozen parameters (BERT's pooler) sit with the head.
  const double frozen = in.pp == 1 || last_stage ? static_cast<double>(rc.total - rc.trainable) : 0;
  const auto rank_params = static_cast<int64_t>(std::llround(rank_total));
  const auto rank_trainable = static_cast<int64_t>(std::llround(rank_total - frozen));
  e.states = model_state_bytes(
      rank_params, rank_trainable,
      StateLayout{p_bytes, half && in.master_weights, in.zero, in.dp, in.offload});
  e.host_bytes = e.states.host_optimizer;
  // Note [pipeline tied gradients under ZeRO]: on a pipeline, stage 2 keeps the root
  // unit's full gradients over the micro-steps (their reduction waits for the tied
  // embedding's exchange): autograd's .grad tensors, from the step's first backward to
  // finalize(), beside the shard its buffer holds (at dp=1 too). Counted as the full
  // root less the shard for the whole step, with the tied head's gradient a transient
  // of the head's backward, the first stage of the debug GPT at pp=2 measured 11%
  // above its estimate at dp=1 (5.7% at dp=2) and the last stage matched only at dp=1
  // (5.7% over at dp=2). A rank's timeline shows the full root held from the end of
  // its first backward on, and nothing more at the head's; under GPipe that first
  // backward, with every micro-batch in flight, is the peak, without it.
  const double root_held =
      in.pp > 1 && in.zero == 2 ? (outside - frozen) * static_cast<double>(p_bytes) : 0.0;

  ActivationOptions ao;
  ao.micro_batch = in.micro_batch;
  ao.act_bytes = a_bytes;
  ao.param_bytes = p_bytes;
  ao.tp = in.tp;
  ao.sequence_parallel = in.sequence_parallel;
  ao.autocast = half && !in.master_weights;
  e.activation = activation_model(spec, ao);
  ActivationModel& am = e.activation;
  if (static_cast<int64_t>(am.blocks.size()) > stage_layers)
    am.blocks.resize(static_cast<size_t>(stage_layers));
  if (in.recompute == RecomputeMode::kSelective)
    for (auto& b : am.blocks) b.saved -= am.selective_saving;

  // ZeRO's units: one per block plus the root (embeddings, final norm, head).
  ZeroUnits zu;
  {
    const double dp = static_cast<double>(in.dp);
    auto padded = [&](double n) { return std::ceil(n / dp) * dp; };
    zu.block = padded(static_cast<double>(rc.per_block)) * static_cast<double>(p_bytes);
    zu.root = padded(outside - frozen) * static_cast<double>(p_bytes);
    const double embedding = static_cast<double>(spec.padded_vocab(in.tp) / in.tp * spec.d_model);
    zu.root_grads = std::max(0.0, outside - frozen - (am.tied_gradient > 0 ? embedding : 0)) *
                    static_cast<double>(p_bytes);
    zu.largest_group = std::max(zu.block, zu.root);
    zu.second_group = zu.root >= zu.block ? (spec.n_layer > 0 ? zu.block : 0.0)
                                          : (spec.n_layer > 1 ? zu.block : zu.root);
  }
  const bool stage3 = in.zero >= 3, reduces_in_backward = in.zero >= 2;

  // The model parts this rank runs: one stage, or (interleaved) a chunk per virtual
  // stage c·p + rank, each with its blocks' recompute segments (indices into am.blocks,
  // the rank's blocks in chunk order) and its ends.
  //
  // Note [interleaved memory]: an interleaved rank holds chunk-micro-batches of
  // different sizes: only the model's last virtual stage keeps the head's logits, only
  // the first the embedding. Counted as in-flight counts over v of the whole rank's
  // micro-batch, the last rank of the debug GPT (pp=2, v=2) was estimated 8.0% over its
  // measurement and (pp=4, 8 blocks) 18.1% over, rank 0 5.2% under. So each chunk is
  // replayed on its own, beside what the schedule holds of each chunk at once
  // (check_schedule's forwarded_by_chunk): within 1.1% in the same runs.
  struct ChunkPart {
    bool first = false, last = false;  // the model's first / last virtual stage
    std::vector<Segment> segments;
  };
  std::vector<ChunkPart> chunks;
  {
    if (chunk_blocks.empty()) chunk_blocks = {static_cast<int64_t>(am.blocks.size())};
    int64_t offset = 0;
    for (size_t c = 0; c < chunk_blocks.size(); ++c) {
      const int64_t vs = static_cast<int64_t>(c) * in.pp + stage;
      const int64_t n = std::min(chunk_blocks[c], static_cast<int64_t>(am.blocks.size()) - offset);
      ChunkPart part{in.pp == 1 || vs == 0, in.pp == 1 || vs == virtual_stages - 1, {}};
      if (n > 0)
        for (Segment seg :
             recompute_segments(in.recompute, n, std::clamp<int64_t>(in.recompute_k, 1, n))) {
          seg.begin += offset, seg.end += offset;
          part.segments.push_back(seg);
        }
      chunks.push_back(std::move(part));
      offset += std::max<int64_t>(n, 0);
    }
  }
  // Note [estimated ZeRO buffers]: a gather in flight holds its output and, on
  // Gloo, a staging buffer of the same size (2 units); a finished one only the
  // gathered unit. Stage 3 keeps the root gathered through forward and backward,
  // the running block, and (prefetch) the next one in flight. From stage 2 on, a
  // block's gradients are made by autograd (activations) while its backward runs,
  // then copied into a flat reduction buffer (communication) that lives until
  // the next block's reduction is launched; the root is reduced last.
  const double staging = in.nccl ? 1.0 : 2.0;
  const double prefetch = in.zero_prefetch ? staging : 0.0;
  // The executor's messages are activations (Note [pipeline executor]): a received
  // gradient (one at a time, on all but the last stage) is counted in backward, a
  // received input is the first block's saved input, and the output a stage sends is
  // the one its micro-batch holds until the gradient comes back (sent_copy where cast).
  const double pipe_comm = 0;
  auto chunk_output = [&](const ChunkPart& part) {
    return part.segments.empty() ? 0.0
                                 : am.blocks[static_cast<size_t>(part.segments.back().end - 1)].out;
  };
  // Stage 3: block i gathered and block `next` prefetched (in flight).
  auto gathered = [&](int64_t i, int64_t next) {
    const auto n = static_cast<int64_t>(am.blocks.size());
    double g = am.blocks[static_cast<size_t>(i)].weights;
    if (next >= 0 && next < n) g += prefetch * am.blocks[static_cast<size_t>(next)].weights;
    return g;
  };
  // Note [estimated optimizer transients]: AdamW's update of one tensor makes two
  // temporaries of its size in fp32 (three when it widens a half gradient for an
  // fp32 master); the gradient norm squares 64K-element chunks in fp64. Under
  // ZeRO a piece is at most the rank's shard of a group. ZeRO stages 1-2 then
  // all-gather each group while the next steps, two in flight, each with a clone
  // of the shard and (Gloo) a staging buffer of the gathered size.
  double largest = largest_tensor(spec) / static_cast<double>(in.tp);
  if (in.zero >= 1)
    largest = std::min(
        largest, zu.largest_group / static_cast<double>(p_bytes) / static_cast<double>(in.dp));
  // On CUDA (Note [multi-tensor AdamW]) a chunk of tensors of up to 16M elements (or
  // one larger tensor) is updated at once: one fp32 temporary (the denominators) per
  // element, two when half gradients are widened; the norm's chunks are that size too.
  const double widen = half && in.master_weights ? 1.0 : 0.0;
  double update_tmp = (2.0 + widen) * 4.0 * largest;
  double norm_tmp = 65536.0 * 8;
  if (in.nccl) {
    const double chunk = std::min(
        std::max(largest, static_cast<double>(kForeachChunkElements)),
        in.zero >= 1 ? zu.largest_group / static_cast<double>(p_bytes) / static_cast<double>(in.dp)
                     : rank_total);
    update_tmp = (1.0 + widen) * 4.0 * chunk;
    norm_tmp = std::min(largest, static_cast<double>(kForeachChunkElements)) * 8;
  }

  // Pipeline: a stage keeps the activations of every micro-batch it has run forward
  // and not yet backward: as many as its rank's list holds at once (check_schedule;
  // under GPipe m, under 1F1B p - s), per chunk when interleaved (Note [interleaved
  // memory]).
  //
  // Note [zb-h1 memory]: under zb-h1 a micro-batch past its backward-input holds only
  // what its deferred weight gradients need (each linear's input and output gradient;
  // Note [deferred weight gradients]) until its W. Counted as whole micro-batches, as
  // 1F1B's, the last stage (one block and the head, whose logits dominate) of the
  // debug GPT on 4 stages was estimated at 68.1 MiB and measured 44.9: it runs each
  // I right after its F, and holds up to three micro-batches' deferred tensors beside
  // the one in flight. Stage 0 went the other way (5% under): its embedding's backward
  // runs while its block's deferred tensors are still held. So each stage takes the
  // costliest of what its list holds beside the micro-batch computing (check_schedule's
  // beside), and a block's backward leaves its deferred tensors behind. Only tp=1
  // defers: a tensor-parallel linear computes its weight gradient in I, and its W is
  // empty.
  const bool deferring = in.pp > 1 && in.schedule == "zb-h1" && in.tp == 1;
  auto deferred_per_micro = [&](const ChunkPart& part) {
    double sum = part.last ? am.head_deferred : 0.0;
    for (const Segment& seg : part.segments)
      for (int64_t i = seg.begin; i < seg.end; ++i)
        sum += am.blocks[static_cast<size_t>(i)].deferred;
    return sum;
  };
  double in_flight = 1;
  std::vector<HeldBeside> beside;
  e.micro_batches_in_flight = 1;
  if (in.pp > 1) {
    STRATA_ASSERT(schedule, "a pipeline stage's estimate needs its schedule's check");
    const ScheduleCheck& held = *schedule;
    e.micro_batches_in_flight = held.in_flight[static_cast<size_t>(stage)];
    in_flight = static_cast<double>(e.micro_batches_in_flight) /
                static_cast<double>(std::max<int64_t>(1, in.pp_virtual));
    beside = held.beside[static_cast<size_t>(stage)];
  }
  // What a micro-batch awaiting its W holds (zb-h1 has one chunk), and a sent input
  // gradient the executor still holds (Note [sent gradients released]; interleaved, up
  // to five at once on the debug GPT's first rank, tp=2 pp=2).
  const double deferred = deferring ? deferred_per_micro(chunks.front()) : 0.0;
  const double message = am.stage_message > 0 ? am.stage_message
                         : am.blocks.empty()  ? 0.0
                                              : am.blocks.front().in;
  // The costliest of what the other micro-batches hold while one computes
  // (`per_micro`: a micro-batch's activations on each chunk), at any moment
  // (kAnyMoment) or only before (0) or after (1) the rank's first backward (any, where
  // the list has no such moment).
  constexpr int kAnyMoment = -1;
  auto costliest_beside = [&](const std::vector<double>& per_micro, int later) {
    if (std::none_of(beside.begin(), beside.end(), [&](const HeldBeside& h) {
          return static_cast<int>(h.after_backward) == later;
        }))
      later = kAnyMoment;
    std::pair<double, HeldBeside> most{-1.0, {}};
    for (const HeldBeside& h : beside) {
      if (later != kAnyMoment && static_cast<int>(h.after_backward) != later) continue;
      double bytes = static_cast<double>(h.awaiting_weight) * deferred +
                     static_cast<double>(h.gradients_sent) * message;
      for (size_t c = 0; c < h.forwarded_by_chunk.size() && c < per_micro.size(); ++c)
        bytes += static_cast<double>(h.forwarded_by_chunk[c]) * per_micro[c];
      if (bytes > most.first) most = {bytes, h};
    }
    return most;
  };
  // Without a pipeline nothing else is held beside the micro-batch replayed.
  auto held_beside = [&](const std::vector<double>& per_micro, bool later) {
    return beside.empty() ? 0.0 : costliest_beside(per_micro, later ? 1 : 0).first;
  };

  // One pipeline stage's step (without a pipeline, the one stage is first and
  // last; interleaved, each chunk in turn): the micro-batches in flight beside the one
  // replayed hold held_beside(), its first micro-step before the rank's first
  // backward, the second after it.
  auto replay = [&](std::vector<double>& per_micro) {
    StepReplay r;
    r.level[kParams] = e.states.parameters;
    r.level[kGrads] = e.states.gradients;
    r.level[kOpt] = e.states.optimizer + (in.host_is_device ? e.host_bytes : 0);
    r.level[kOtherCat] = in.data_bytes;
    r.mark("step.begin");
    const int64_t micro_steps = std::min<int64_t>(in.micro_batches, 2);  // later ones repeat
    for (int64_t m = 0; m < micro_steps; ++m) {
      for (size_t c = 0; c < chunks.size(); ++c) {
        const ChunkPart& part = chunks[c];
        const bool first = part.first, last = part.last;
        const std::string mb = chunks.size() > 1 ? c10::str("micro[", m, "] chunk[", c, "]")
                                                 : c10::str("micro[", m, "]");
        // A part that is not the model's last sends its output, which it holds until
        // the gradient returns anyway (a copy only where it is cast: sent_copy), and
        // receives that gradient. Counted as a tensor of its own, the first stages of
        // the matrix's pipeline rows came out 0.4-2.7% over their runs (the debug GPT
        // with GPipe and full recompute, 16 micro-batches of one sequence in flight).
        const double sent_output = !last ? am.sent_copy : 0.0;
        const double grad_recv = !last ? chunk_output(part) : 0.0;
        // From the second micro-step on, after the first backward: the others held
        // then, and the ZeRO-2 root's gradients.
        const double in_flight_before = held_beside(per_micro, m > 0) + (m > 0 ? root_held : 0.0);
        double& mine = per_micro[c];
        r.level[kActs] = in_flight_before + am.batch;
        r.level[kComm] = pipe_comm;
        r.mark(mb + ".forward.begin");
        if (first) r.level[kActs] += am.embed;
        for (const Segment& s : part.segments) {
          for (int64_t i = s.begin; i < s.end; ++i) {
            const BlockActivations& b = am.blocks[static_cast<size_t>(i)];
            if (stage3) r.level[kComm] = pipe_comm + zu.root + gathered(i, i + 1);
            r.level[kActs] += s.recompute ? (i + 1 == s.end ? b.out : 0.0) : b.saved;
            if (!s.recompute || i + 1 == s.end) r.mark(c10::str("block[", i, "].forward.end"));
          }
        }
        r.level[kActs] += sent_output;
        mine = std::max(mine, r.level[kActs] - in_flight_before - am.batch);
        r.level[kActs] += grad_recv;
        // Stage 3: the blocks are freed; the last one's gather for backward starts.
        if (stage3) r.level[kComm] = pipe_comm + zu.root + staging * am.blocks.back().weights;
        if (last) {
          // The head's saved tensors (the logits) stay with their micro-batch until its
          // backward: on a last stage that runs several forwards first (GPipe) each one
          // in flight holds them too.
          if (in_flight > 1)
            mine = std::max(mine, r.level[kActs] - in_flight_before - am.batch + am.head);
          r.level[kActs] += am.head;
          r.mark(mb + ".loss");
          r.mark("head.backward (peak)", am.head_backward);
          r.level[kActs] += -am.head + (am.block_keeps_output ? am.blocks.back().out : 0.0) +
                            (deferring ? am.head_deferred : 0.0);
        }
        // Without a persistent .grad (DDP clears it, ZeRO-2/3 hands it to a reduction)
        // the head's part of a tied weight's gradient is held until the embedding's.
        const bool grads_persist = in.zero == 1 || (in.zero == 0 && in.dp == 1);
        const double tied_held = first && last && !grads_persist ? am.tied_gradient : 0.0;
        r.level[kActs] += tied_held;
        if (reduces_in_backward) r.level[kActs] += zu.root_grads;  // wait for the root's reduction
        double in_flight_reduction = 0;
        for (auto it = part.segments.rbegin(); it != part.segments.rend(); ++it) {
          const Segment& s = *it;
          if (s.recompute) {
            // The re-run keeps everything again, the segment's input until its end.
            for (int64_t i = s.begin; i < s.end; ++i)
              r.level[kActs] += am.blocks[static_cast<size_t>(i)].saved;
            r.mark(c10::str("block[", s.end - 1, "].recompute"));
          }
          for (int64_t i = s.end - 1; i >= s.begin; --i) {
            const BlockActivations& b = am.blocks[static_cast<size_t>(i)];
            double extra_acts = b.backward_extra;
            double comm = pipe_comm + in_flight_reduction;
            if (stage3) comm += zu.root + gathered(i, i - 1);
            if (reduces_in_backward) {
              // The weight gradient a kernel makes is the .grad itself here.
              extra_acts += b.weights - b.weight_grad;
              comm += b.weights;  // the reduction buffer, while the previous one is in flight
            }
            r.level[kComm] = comm;
            r.mark(c10::str("block[", i, "].backward (peak)"), extra_acts);
            if (reduces_in_backward) in_flight_reduction = b.weights;
            r.level[kActs] -= b.saved;
            r.level[kActs] += b.in - b.out + (deferring ? b.deferred : 0.0);
          }
          if (s.recompute && s.begin > 0)
            r.level[kActs] -= am.blocks[static_cast<size_t>(s.begin - 1)].out;
        }
        if (first && am.embed_backward > 0)
          r.mark(mb + ".embed.backward (peak)", am.embed_backward);
        if (first && reduces_in_backward) {
          // The root is reduced last: its gradients are copied into a flat buffer while
          // they are still autograd's (and, stage 3, the root is still gathered).
          r.level[kComm] = pipe_comm + in_flight_reduction + zu.root + (stage3 ? zu.root : 0.0);
          r.mark("zero.reduce root (peak)");
        }
        r.level[kActs] = in_flight_before + am.batch + (deferring ? deferred_per_micro(part) : 0.0);
        r.level[kComm] = pipe_comm;
        r.mark(mb + ".backward.end");
      }
    }
    // Note [pipeline tied exchange]: the two ends of a pipeline sum their tied
    // embedding's gradients after backward (PipelineGradSync::exchange_tied): each
    // sends a copy of its .grad and receives the other's, two tensors of the tied
    // weight's size beside the .grad itself (under ZeRO-2 the root's .grad tensors,
    // still held; else in the gradients). Unmodelled, BERT-debug's first stage at
    // dp=2 pp=2 under ZeRO-2 measured 7.1% above its estimate, its peak there.
    if (in.pp > 1 && (first_stage || last_stage) && am.tied_gradient > 0) {
      r.level[kActs] = root_held;
      r.level[kComm] = 0;
      r.mark("pipeline.tied exchange (peak)");
      r.points.back().bytes[kOtherCat] += 2 * am.tied_gradient;
    }
    r.level[kActs] = 0;
    r.level[kComm] = 0;
    r.mark("optimizer.begin");
    r.mark("optimizer.step (peak)", 0, 0, std::max(update_tmp, norm_tmp));
    if (in.zero >= 1 && in.zero <= 2 && in.dp > 1) {
      // The two largest groups in flight at once (the root beside a block, when the
      // vocabulary makes the root the largest), each a shard clone plus Gloo's staging.
      auto in_flight = [&](double group) {
        return group / static_cast<double>(in.dp) + (in.nccl ? 0.0 : group);
      };
      r.mark("zero.all_gather (peak)", 0, in_flight(zu.largest_group) + in_flight(zu.second_group));
    }
    r.mark("optimizer.end");
    r.mark("step.end");
    return r.points;
  };

  // The first replay learns a micro-batch's activations (per_micro), which the second
  // holds beside each one replayed: its first micro-step as the rank's first backward
  // sees them, the next as those after it.
  std::vector<double> per_micro(chunks.size(), 0.0);
  (void)replay(per_micro);
  e.timeline = replay(per_micro);
  e.activations_per_micro_batch = std::accumulate(per_micro.begin(), per_micro.end(), 0.0);
  if (!beside.empty() && chunks.size() == 1) {
    const HeldBeside h = costliest_beside(per_micro, kAnyMoment).second;
    e.micro_batches_in_flight = h.forwarded + 1;
    if (deferring) {
      e.micro_batches_awaiting_weight = h.awaiting_weight;
      e.deferred_per_micro_batch = deferred;
    }
  }
  if (in.pp > 1)
    for (auto& p : e.timeline) p.phase = c10::str("stage ", stage, ": ", p.phase);

  for (const auto& p : e.timeline) {
    if (p.total() > e.peak.total()) e.peak = p;
    for (size_t c = 0; c < kNumCategories; ++c)
      e.category_peak[c] = std::max(e.category_peak[c], p.bytes[c]);
  }
  if (in.comm_hook != "none" && in.zero == 0 && in.dp > 1)
    e.notes.push_back("comm hook " + in.comm_hook + ": its compressed buffers are not estimated");
  if (half && !in.master_weights && spec.family == Family::kResNet)
    e.notes.push_back(
        "ResNet under autocast (master_weights=false): feature maps estimated at 2 bytes, not "
        "checked against runs");
  return e;
}
}  // namespace

MemoryEstimate estimate_memory(const EstimateInput& in) {
  // The schedule is checked once, for all its ranks (check_schedule walks every rank's
  // list). Checked again for each stage, p times over, planning GPT-3 175B's 134
  // layouts on 1024 GPUs took 44 s, and 87 s once the check also said what each action
  // holds beside it; checked once, 3 s.
  std::optional<ScheduleCheck> schedule;
  if (in.pp > 1)
    schedule = check_schedule(
        pipeline_schedule(parse_schedule_kind(in.schedule), in.pp, in.micro_batches, in.pp_virtual),
        in.micro_batches, in.pp_virtual);
  const ScheduleCheck* check = schedule ? &*schedule : nullptr;
  if (in.pp > 1 && in.stage < 0) {
    // Note [estimated pipeline stages]: every stage differs (the embeddings on the
    // first, the head on the last, its own blocks and micro-batches in flight); the
    // estimate is the stage that peaks highest.
    MemoryEstimate best;
    for (int64_t s = 0; s < in.pp; ++s) {
      EstimateInput one = in;
      one.stage = s;
      MemoryEstimate e = estimate_stage(one, check);
      if (s == 0 || e.peak.total() > best.peak.total()) best = std::move(e);
    }
    return best;
  }
  return estimate_stage(in, check);
}

LayerActivationCheck compare_with_korthikanti(const ModelSpec& spec, int64_t micro_batch) {
  LayerActivationCheck c;
  c.korthikanti =
      korthikanti_layer_activation_bytes(spec.seq_len, micro_batch, spec.d_model, spec.n_head);
  ActivationOptions o;
  o.micro_batch = micro_batch;
  o.act_bytes = 2;
  o.param_bytes = 2;
  c.strata = activation_model(spec, o).blocks.front().saved;
  c.explanation = c10::str(
      "Korthikanti et al. count 34 sbh + 5as^2b bytes per layer (2-byte activations, 1-byte "
      "dropout masks, the (s, s) scores and probabilities). Strata keeps 32 sbh: no dropout masks "
      "(counter-based dropout regenerates them in backward), and ",
      spec.dropout > 0 ? "on CPU with attention dropout 4as^2b of softmax output and dropped "
                         "probabilities (no mask)"
                       : "instead of the s^2 terms only the fused attention kernel's log-sum-exp "
                         "(2as b bytes)",
      ", plus fp32 layer-norm statistics (16 sb).");
  return c;
}

}  // namespace strata
