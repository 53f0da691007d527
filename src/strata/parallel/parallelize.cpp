#include "strata/parallel/parallelize.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/core/logging.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/models/build.h"
#include "strata/models/linear.h"
#include "strata/parallel/data/ddp.h"
#include "strata/parallel/pipeline/partition.h"
#include "strata/parallel/pipeline/pp_grad_sync.h"
#include "strata/parallel/pipeline/profile.h"
#include "strata/parallel/recompute.h"
#include "strata/parallel/tensor/regions.h"
#include "strata/parallel/tensor/tp_grad_sync.h"
#include "strata/parallel/zero/zero.h"

namespace strata {

namespace {

// The model's own checkpoint state: frozen parameters and buffers (BatchNorm's running
// statistics), written by the first replica; trainable weights are the optimizer's.
// Loading first compares every tensor's shape, so an incompatible checkpoint is refused
// at the first differing tensor before anything is read.
class PartsState : public Stateful {
 public:
  PartsState(std::vector<std::shared_ptr<Model>> parts, bool writes,
             std::unordered_map<const void*, TpGeometry> geometry)
      : parts_(std::move(parts)), writes_(writes), geometry_(std::move(geometry)) {}

  void save_state(std::vector<TensorPiece>& out) override {
    if (!writes_) return;
    for (auto& part : parts_) {
      for (auto& p : part->named_parameters())
        if (!p.value().requires_grad()) out.push_back({"model." + p.key(), p.value(), {}, {}});
      for (auto& b : part->named_buffers()) out.push_back({"buffer." + b.key(), b.value(), {}, {}});
    }
  }

  void load_state(const PieceReader& in) override {
    for (auto& part : parts_) {
      for (auto& p : part->named_parameters()) {
        auto g = geometry_.find(p.value().unsafeGetTensorImpl());
        in.expect_shape("model." + p.key(),
                        g == geometry_.end() ? p.value().sizes().vec() : g->second.global_shape);
      }
      for (auto& b : part->named_buffers())
        in.expect_shape("buffer." + b.key(), b.value().sizes().vec());
    }
    for (auto& part : parts_) {
      for (auto& p : part->named_parameters())
        if (!p.value().requires_grad()) in.read("model." + p.key(), p.value());
      for (auto& b : part->named_buffers()) in.read("buffer." + b.key(), b.value());
    }
  }

 private:
  std::vector<std::shared_ptr<Model>> parts_;
  bool writes_;
  std::unordered_map<const void*, TpGeometry> geometry_;  // tensor-parallel slices
};

TpContext apply_tensor_parallel(const ModelSpec& spec, Mesh& mesh, const Config& cfg) {
  TpContext tp{mesh.coord().tp, mesh.dims().tp(), nullptr};
  if (tp.size > 1) {
    STRATA_CHECK((4 * spec.d_model) % tp.size == 0, "tp=", tp.size, " does not divide the MLP ",
                 "width 4*d_model=", 4 * spec.d_model, "; choose tp dividing it");
    tp.regions = make_tp_regions(mesh.comm(Axis::kTp));
    tp.sequence_parallel = cfg.parallel.sequence_parallel;
    STRATA_CHECK(!tp.sequence_parallel || spec.seq_len % tp.size == 0,
                 "parallel.sequence_parallel=true with model.seq_len=", spec.seq_len,
                 " not divisible by tp=", tp.size, "; choose a seq_len divisible by tp");
  }
  log_rank0("parallelize tensor parallel: tp=", tp.size,
            tp.size == 1 ? " (whole linears)"
                         : " (column/row-parallel linears, vocab-parallel embedding and loss)",
            tp.sequence_parallel ? c10::str("; sequence parallel: ", spec.seq_len / tp.size,
                                            " positions of the residual stream per rank")
                                 : "");
  return tp;
}

RecomputeMode apply_recompute_mode(const Config& cfg) {
  const RecomputeMode mode = parse_recompute(cfg.memory.recompute);
  log_rank0("parallelize recompute: ", recompute_name(mode),
            mode == RecomputeMode::kEveryK ? c10::str(" (k=", cfg.memory.recompute_k, ")")
                                           : std::string());
  return mode;
}

// Note [stage profile]: every rank must cut the model the same way, so one set of
// measured costs serves all: rank 0's cached profile (run_dir/pp_profile.json, for the
// same shapes, threads and device) broadcast, or else every rank profiles at once and
// the world averages. Rank 0 caches the result.
StageCosts agreed_stage_profile(const ModelSpec& spec, Mesh& mesh, const Config& cfg,
                                at::Device device) {
  const auto& t = cfg.training;
  const int64_t micro =
      t.micro_batch_size > 0
          ? t.micro_batch_size
          : std::max<int64_t>(1, t.batch_size / std::max<int64_t>(1, mesh.dims().dp()));
  const nlohmann::json key = {
      {"flavour", spec.flavour},          {"d_model", spec.d_model},      {"n_head", spec.n_head},
      {"seq_len", spec.seq_len},          {"vocab", spec.padded_vocab()}, {"micro_batch", micro},
      {"threads", at::get_num_threads()}, {"device", device.str()}};
  const std::string path = cfg.logging.run_dir + "/pp_profile.json";
  Comm& world = mesh.comm(Axis::kWorld);
  at::Tensor costs = at::zeros({4}, at::kDouble);  // found, block, first, last
  if (world.rank() == 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    const auto cached = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!cached.is_discarded() && cached.value("key", nlohmann::json()) == key) {
      auto a = costs.accessor<double, 1>();
      a[0] = 1;
      a[1] = cached.value("block", 0.0);
      a[2] = cached.value("first", 0.0);
      a[3] = cached.value("last", 0.0);
    }
  }
  world.broadcast(costs, 0).wait();
  const bool cached = costs[0].item<double>() > 0;
  if (!cached) {
    const StageCosts mine = profile_stage_costs(spec, micro, device);
    costs = at::tensor({0.0, mine.block.front(), mine.first, mine.last}, at::kDouble);
    world.all_reduce(costs).wait();
    costs.div_(static_cast<double>(world.size()));
  }
  auto a = costs.accessor<double, 1>();
  StageCosts c;
  c.block.assign(static_cast<size_t>(spec.n_layer), a[1]);
  c.first = a[2];
  c.last = a[3];
  if (world.rank() == 0 && !cached) {
    std::filesystem::create_directories(cfg.logging.run_dir);
    write_file_atomic(
        path,
        nlohmann::json{{"key", key}, {"block", a[1]}, {"first", a[2]}, {"last", a[3]}}.dump(1));
  }
  log_rank0("parallelize pipeline profile: a block ", a[1] * 1e3, " ms, the embedding ", a[2] * 1e3,
            " ms, the head and loss ", a[3] * 1e3, " ms forward+backward per ", "micro-batch (",
            cached ? c10::str("cached in ", path) : "measured now", ")");
  return c;
}

// This rank's virtual stages: chunk c is stage c*p + rank (Note [schedules are data]).
std::vector<StageInfo> pipeline_stages(const ModelSpec& spec, Mesh& mesh, const Config& cfg,
                                       at::Device device, std::vector<int64_t>& blocks_out) {
  const auto& p = cfg.parallel;
  const int64_t pp = mesh.dims().pp(), v = p.pp_virtual, stages = pp * v;
  if (pp == 1 && v == 1) return {StageInfo::whole()};
  const bool custom = spec.family == Family::kCustom;
  STRATA_CHECK(spec.family == Family::kGpt || spec.family == Family::kBert || custom,
               "parallel.pp=", pp, ": ", spec.flavour,
               " has no transformer blocks to cut into stages; use parallel.pp=1");
  STRATA_CHECK(!custom || (spec.n_layer > 0 && !spec.activation_shape.empty()), "parallel.pp=", pp,
               ": the program's model ", spec.flavour,
               " does not say its blocks and activation shape; set UserModel::blocks and "
               "UserModel::activation_shape");
  STRATA_CHECK(spec.n_layer >= stages, "parallel.pp=", pp,
               v > 1 ? c10::str(" x pp_virtual=", v) : "", " needs at least ", stages,
               " blocks (the model has ", spec.n_layer, "); use fewer stages");
  STRATA_CHECK(v == 1 || spec.n_layer % stages == 0, "the interleaved schedule with pp=", pp,
               " and pp_virtual=", v, " needs blocks (", spec.n_layer, ") divisible by ", stages,
               "; change pp_virtual or model.n_layer");
  std::optional<StageCosts> measured;
  if (p.pp_partition == "auto" && v == 1 && p.pp_profile && !custom)
    measured = agreed_stage_profile(spec, mesh, cfg, device);
  const std::vector<int64_t> blocks =
      stage_partition(spec, p.pp_partition, stages, v, measured ? &*measured : nullptr);
  blocks_out = blocks;
  std::vector<StageInfo> out;
  for (int64_t c = 0; c < v; ++c) {
    const int64_t vs = c * pp + mesh.coord().pp;
    int64_t begin = 0;
    for (int64_t s = 0; s < vs; ++s) begin += blocks[static_cast<size_t>(s)];
    out.push_back({begin, begin + blocks[static_cast<size_t>(vs)], vs == 0, vs == stages - 1});
  }
  log_rank0("parallelize pipeline partition: ", c10::Join(",", blocks), " blocks over ", stages,
            " stages (", p.pp_partition,
            p.pp_partition == "auto" && v == 1 ? (measured ? ": profiled"
                                                  : custom ? ": even, the program's model"
                                                           : ": FLOP counts")
                                               : "",
            "), ", p.pp_schedule, " schedule");
  return out;
}

// Builds this rank's parts from the seed and applies recompute over their blocks.
std::vector<std::shared_ptr<Model>> apply_pipeline_stage(const ModelSpec& spec, Mesh& mesh,
                                                         const Config& cfg, TpContext tp,
                                                         RecomputeMode mode, at::Device device,
                                                         std::vector<int64_t>& stage_blocks) {
  check_pipeline_layout(cfg.parallel, mesh.dims());
  const int64_t pp = mesh.dims().pp();
  std::vector<std::shared_ptr<Model>> parts;
  for (const StageInfo& stage : pipeline_stages(spec, mesh, cfg, device, stage_blocks)) {
    // Every rank draws the same initial weights (Note [layer init]); dropout then gets
    // a per-rank stream (the trainer reseeds).
    at::manual_seed(static_cast<uint64_t>(cfg.training.seed));
    std::shared_ptr<Model> part;
    {
      MemoryScope scope(Category::kParameters);
      part = build_model(spec, stage, tp);
      part->to(device);
    }
    apply_recompute(*part, mode, cfg.memory.recompute_k);
    if (cfg.parallel.pp_schedule == "zb-h1")  // Note [deferred weight gradients]
      for (const auto& m : part->modules())
        if (auto linear = std::dynamic_pointer_cast<ParallelLinear>(m))
          linear->defer_weight_grad = true;
    log_rank0("parallelize pipeline stage: pp=", pp, ", ", stage.to_string(spec.n_layer), ", ",
              part->segments().size(), " segment(s)");
    parts.push_back(part);
  }
  return parts;
}

void apply_precision(ParallelModel& pm, const Config& cfg, at::Device device) {
  pm.precision = parse_precision(cfg.memory.precision);
  pm.compute_dtype = compute_dtype(pm.precision);
  check_precision_supported(pm.precision, device);
  const bool half_params = pm.precision != Precision::kFp32 && cfg.memory.master_weights;
  if (half_params) {
    MemoryScope scope(Category::kParameters);
    for (auto& part : pm.parts) cast_model(*part, pm.compute_dtype);
  }
  log_rank0("parallelize precision: ", cfg.memory.precision,
            pm.precision == Precision::kFp32 ? ""
            : half_params                    ? " (half parameters and gradients, fp32 masters)"
                                             : " (fp32 parameters, half compute)");
}

ZeroDataParallel* apply_data_parallel(ParallelModel& pm, Mesh& mesh, const Config& cfg) {
  const auto& p = cfg.parallel;
  Comm& dp = mesh.comm(Axis::kDp);
  STRATA_ASSERT(pm.parts.size() == 1 || dp.size() == 1, "data parallelism wraps one model part");
  ZeroDataParallel* zero = nullptr;
  if (p.zero > 0) {
    if (dp.size() == 1)
      log_rank0("parallel.zero=", p.zero, " with dp=1: the one rank holds every shard, so ZeRO ",
                "saves no memory here",
                p.offload ? " (offload still moves the optimizer state to host memory)" : "");
    // ZeRO broadcasts and checks like DDP, then shards; the optimizer is its own.
    ZeroOptions opts = zero_options_from(cfg);
    if (mesh.dims().tp() > 1 || mesh.dims().pp() > 1)
      for (const NamedParam& np : pm.params) opts.tp_params.emplace(np.name, np);
    auto z = std::make_unique<ZeroDataParallel>(pm.parts[0], dp, std::move(opts));
    zero = z.get();
    pm.grad_sync = std::move(z);
  } else if (dp.size() > 1) {
    // DDP broadcasts rank 0's weights, checks that every rank built the same model,
    // and makes the gradients views into its buckets (they are tagged kGradients).
    DdpOptions opts = ddp_options_from(p);
    opts.writes_state = mesh.coord().dp == 0 && mesh.coord().tp == 0;
    pm.grad_sync = std::make_unique<DistributedDataParallel>(pm.parts[0], dp, std::move(opts));
  } else {
    pm.grad_sync = std::make_unique<LocalGradSync>(pm.params);
  }
  // Note [norm through the decorators]: the innermost sync that knows the weighting
  // computes this rank's squared norm (ZeRO over its shards; else the tp or pp decorator
  // from the parameters, replicated ones weighted 1/tp); each decorator outside it sums
  // its inner's norm over its own axis. Giving the pp decorator the parameters too when
  // a tp decorator is inside would skip the tp sum (the norm was 28% off at tp=2 x pp=4).
  const std::vector<NamedParam> none;
  const bool tp = mesh.dims().tp() > 1;
  if (tp)
    pm.grad_sync = std::make_unique<TensorParallelGradSync>(
        std::move(pm.grad_sync), zero ? none : pm.params, mesh.comm(Axis::kTp));
  if (mesh.dims().pp() > 1) {
    auto pipeline = std::make_unique<PipelineGradSync>(
        std::move(pm.grad_sync), zero || tp ? none : pm.params, mesh.comm(Axis::kPp), pm.parts);
    if (zero) zero->defer_root_reduce(pipeline->take_exchange());
    pm.grad_sync = std::move(pipeline);
  }
  log_rank0("parallelize data parallel: ", pm.grad_sync->describe());
  return zero;
}

void apply_optimizer(ParallelModel& pm, ZeroDataParallel* zero, const Config& cfg) {
  if (zero) {
    pm.optimizer = std::make_unique<ZeroOptimizer>(*zero);
  } else {
    const auto& t = cfg.training;
    MemoryScope scope(Category::kOptimizer);
    auto adam =
        std::make_unique<AdamW>(pm.params, AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay},
                                /*master_weights=*/cfg.memory.master_weights);
    pm.optimizer = std::move(adam);
  }
  log_rank0("parallelize optimizer: ", pm.optimizer->describe());
}

}  // namespace

void check_pipeline_layout(const ParallelConfig& p, const ParallelDims& dims) {
  const int64_t tp = dims.tp(), pp = dims.pp();
  if (pp > 1) {
    STRATA_CHECK(tp == 1 || p.pp_schedule != "zb-h1", "parallel.pp_schedule=zb-h1 with tp=", tp,
                 ": its deferred weight gradients are not split over tensor-parallel ",
                 "ranks yet; use pp_schedule=1f1b or interleaved with tp");
    STRATA_CHECK(p.zero <= 2, "parallel.zero=3 with pp=", pp, ": ZeRO-3 gathers and frees ",
                 "each block around one forward and backward, and a pipeline interleaves ",
                 "several micro-batches' passes; use parallel.zero=1 or 2");
    STRATA_CHECK(p.zero == 0 || p.pp_virtual == 1, "parallel.zero=", p.zero,
                 " with pp_virtual=", p.pp_virtual, ": ZeRO shards one model part per rank; ",
                 "use pp_virtual=1 or parallel.zero=0");
    STRATA_CHECK(p.pp_virtual == 1 || dims.dp() == 1, "parallel.pp_virtual=", p.pp_virtual,
                 " with dp=", dims.dp(), ": data parallelism over ",
                 "several chunks per rank is not supported yet; use dp=1 or pp_virtual=1");
    STRATA_CHECK(p.pp_schedule != "zb-h1" || dims.dp() == 1,
                 "parallel.pp_schedule=zb-h1 with dp=", dims.dp(),
                 ": its deferred weight gradients are accumulated after backward, where data ",
                 "parallelism's gradient hooks do not see them; use dp=1 or pp_schedule=1f1b");
    STRATA_CHECK(p.pp_schedule != "zb-h1" || p.zero == 0, "parallel.pp_schedule=zb-h1 with ",
                 "parallel.zero=", p.zero, ": ZeRO reduces each gradient when backward reaches ",
                 "it, before zb-h1's deferred weight step; use parallel.zero=0 or 1f1b");
  }
}

int64_t ParallelModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& part : parts) n += part->num_parameters();
  return n;
}

ParallelModel parallelize(const ModelSpec& spec, Mesh& mesh, const Config& cfg, at::Device device) {
  ParallelModel pm;
  const TpContext tp = apply_tensor_parallel(spec, mesh, cfg);
  const RecomputeMode mode = apply_recompute_mode(cfg);
  pm.parts = apply_pipeline_stage(spec, mesh, cfg, tp, mode, device, pm.stage_blocks);
  apply_precision(pm, cfg, device);
  // Frozen parameters (requires_grad false, e.g. BERT's pooler under the MLM loss) get
  // no gradient buffer, no optimizer state and no all-reduce; they are still saved.
  // Tensor-parallel slices say where they sit; tensors every tp rank holds whole are
  // written by tp rank 0 and weigh 1/tp in the tp-summed gradient norm. Only the first
  // data-parallel replica writes, and a stage's tied copy is left to its owner.
  std::unordered_map<const void*, TpGeometry> geometry;
  for (auto& part : pm.parts) geometry.merge(tp_geometry(*part));
  const bool first_replica = mesh.coord().dp == 0;
  for (auto& part : pm.parts) {
    const std::vector<std::string> copies = part->tied_copies();
    for (auto& item : part->named_parameters()) {
      NamedParam np{item.key(), item.value()};
      auto g = geometry.find(item.value().unsafeGetTensorImpl());
      if (g != geometry.end()) {
        np.global_shape = g->second.global_shape;
        np.runs = g->second.runs;
      } else {
        np.norm_weight = 1.0 / static_cast<double>(tp.size);
      }
      const bool copy = std::find(copies.begin(), copies.end(), item.key()) != copies.end();
      np.shard_saved = (g != geometry.end() || tp.rank == 0) && !copy;
      if (copy) np.norm_weight = 0;  // its owner's gradient counts (after the exchange)
      np.saved = first_replica && np.shard_saved;
      if (!item.value().requires_grad())
        STRATA_ASSERT(g == geometry.end(), "frozen parameter ", item.key(), " is a tp slice");
      (item.value().requires_grad() ? pm.params : pm.frozen).push_back(np);
    }
  }
  ZeroDataParallel* zero = apply_data_parallel(pm, mesh, cfg);
  apply_optimizer(pm, zero, cfg);
  pm.model_state = std::make_unique<PartsState>(
      pm.parts, mesh.coord().dp == 0 && mesh.coord().tp == 0, std::move(geometry));
  return pm;
}

}  // namespace strata
