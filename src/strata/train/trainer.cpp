#include "strata/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <signal.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/core/stop_signal.h"
#include "strata/memory/device_stats.h"
#include "strata/memory/process_memory.h"
#include "strata/memory/timeline.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/models/build.h"
#include "strata/train/checkpoint.h"
#include "strata/train/plan.h"

namespace strata {

namespace fs = std::filesystem;

namespace {
// Note [CPU peak FLOPs]: one AVX2 core retires two 8-wide fp32 FMAs a cycle (32
// FLOPs); at ~2.5 GHz that is 80 GFLOP/s a thread. Used for MFU unless
// logging.peak_tflops names the device's real peak.
constexpr double kCpuFlopsPerThread = 2.5e9 * 32;

// Note [injected overflow]: STRATA_INJECT_INF="RANK:STEP[,STEP...]" puts an inf into
// one gradient element on that rank after backward (after DDP's all-reduce, so no
// other rank sees it) at those 1-based steps. Tests use it to check that every rank
// skips the step and the loss scale backs off.
std::vector<int64_t> inject_inf_steps(int64_t rank) {
  const char* v = std::getenv("STRATA_INJECT_INF");
  if (!v || !*v) return {};
  std::string spec(v);
  const auto colon = spec.find(':');
  STRATA_CHECK(colon != std::string::npos, "STRATA_INJECT_INF=", spec,
               " must be RANK:STEP[,STEP...], e.g. 1:5,6");
  if (std::stoll(spec.substr(0, colon)) != rank) return {};
  std::vector<int64_t> steps;
  std::stringstream ss(spec.substr(colon + 1));
  for (std::string item; std::getline(ss, item, ',');) steps.push_back(std::stoll(item));
  return steps;
}

}  // namespace

Trainer::Trainer(Config cfg, const WorldInfo& info) : cfg_(std::move(cfg)), info_(info) {
  validate_config(cfg_);
  const auto& t = cfg_.training;
  const auto& p = cfg_.parallel;
  ParallelDims dims(p.dp, p.tp, p.pp, info.world_size);
  STRATA_CHECK(dims.tp() == 1 && dims.pp() == 1, "parallel.tp=", dims.tp(), " pp=", dims.pp(),
               ": this build has data parallelism only; set parallel.tp=1 parallel.pp=1");
  set_log_rank(static_cast<int>(info.rank));
  const auto hw = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  threads_ = t.threads > 0 ? t.threads : std::max<int64_t>(1, hw / info.local_world_size);
  at::set_num_threads(static_cast<int>(threads_));
  at::globalContext().setDeterministicAlgorithms(t.deterministic, /*warn_only=*/true);
  if (cfg_.memory.track) install_tracking_allocator();
  if (t.device == "cpu" && cfg_.memory.reuse_host_memory) keep_freed_host_memory();
  peak_flops_ = cfg_.logging.peak_tflops > 0 ? cfg_.logging.peak_tflops * 1e12
                                             : kCpuFlopsPerThread * static_cast<double>(threads_);

  const auto device = t.device == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  if (device == c10::DeviceType::CUDA) {
    STRATA_CHECK(
        torch::cuda::is_available(),
        "training.device=cuda but no CUDA device is usable "
        "(no GPU, or a CPU build: rebuild with -DSTRATA_CUDA=ON); use training.device=cpu");
    const auto index = static_cast<c10::DeviceIndex>(
        info.local_rank % static_cast<int64_t>(torch::cuda::device_count()));
    device_ = at::Device(c10::DeviceType::CUDA, index);
    c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(device_);
  }
  mesh_ = std::make_unique<Mesh>(
      info, dims, device, std::chrono::milliseconds(static_cast<int64_t>(p.timeout_s * 1000)));
  dp_rank_ = mesh_->coord().dp;

  data_ = open_data_source(cfg_);
  // The same checks `strata estimate` makes (Note [one validation path]).
  const RunPlan plan = plan_run(cfg_, info.world_size, data_.shape);
  spec_ = plan.spec;
  build_datasets(data_, cfg_, spec_);
  micro_ = plan.micro_batch;
  accum_ = plan.accum;
  const int64_t dp = dims.dp();

  // Every rank builds the same initial weights from the seed; dropout then gets
  // a per-rank stream (reseeded below).
  at::manual_seed(static_cast<uint64_t>(t.seed));
  rss_base_ = rss_bytes();  // the runtime, libraries and data, before any model state
  {
    MemoryScope scope(Category::kParameters);
    model_ = build_model(spec_);
    model_->to(device_);
  }
  // Recompute wrapping, then precision (DESIGN.md's order), then DDP and optimizer.
  model_->set_recompute(parse_recompute(cfg_.memory.recompute), cfg_.memory.recompute_k);
  precision_ = parse_precision(cfg_.memory.precision);
  compute_dtype_ = compute_dtype(precision_);
  check_precision_supported(precision_, device_);
  if (precision_ != Precision::kFp32 && cfg_.memory.master_weights) {
    MemoryScope scope(Category::kParameters);
    cast_model(*model_, compute_dtype_);
  }
  scaler_ = std::make_unique<LossScaler>(LossScalerOptions{
      precision_ == Precision::kFp16, cfg_.memory.loss_scale_init, cfg_.memory.loss_scale_growth,
      cfg_.memory.loss_scale_backoff, cfg_.memory.loss_scale_interval});
  inject_inf_steps_ = inject_inf_steps(info.rank);
  // Frozen parameters (requires_grad false, e.g. BERT's pooler under the MLM loss)
  // get no gradient buffer, no optimizer state and no all-reduce; they are still
  // saved in checkpoints.
  for (auto& item : model_->named_parameters()) {
    if (item.value().requires_grad())
      params_.push_back({item.key(), item.value()});
    else
      frozen_.push_back({item.key(), item.value()});
  }
  Comm& dp_comm = mesh_->comm(Axis::kDp);
  if (p.zero > 0) {
    if (dp_comm.size() == 1)
      log_rank0("parallel.zero=", p.zero, " with dp=1: the one rank holds every shard, so ZeRO ",
                "saves no memory here",
                p.offload ? " (offload still moves the optimizer state to host memory)" : "");
    // ZeRO broadcasts and checks like DDP, then shards; it owns the optimizer.
    zero_ = std::make_unique<ZeroDataParallel>(model_, dp_comm, zero_options_from(cfg_));
  } else if (dp_comm.size() > 1) {
    // DDP broadcasts rank 0's weights, checks that every rank built the same model,
    // and makes the gradients views into its buckets (they are tagged kGradients).
    ddp_ = std::make_unique<DistributedDataParallel>(model_, dp_comm, ddp_options_from(p));
  } else {
    // Note [gradient buffers]: gradients are allocated once, before the first
    // backward, and accumulated into in place; zero_grad zeroes them. So the
    // gradients category is exactly the .grad buffers, and steady-state memory is
    // the same from the first step on.
    MemoryScope scope(Category::kGradients);
    for (auto& np : params_) np.param.mutable_grad() = at::zeros_like(np.param);
  }
  if (!zero_) {
    MemoryScope scope(Category::kOptimizer);
    opt_ = std::make_unique<AdamW>(params_, AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay},
                                   /*master_weights=*/cfg_.memory.master_weights);
  }
  if (info.rank == 0 && cfg_.logging.memory_timeline_steps > 0 && cfg_.memory.track) {
    // Added after ZeRO's hooks: its gathers come before the forward marks and its
    // frees after them.
    timeline_hooks_ = std::make_unique<TimelineBlockHooks>();
    model_->add_block_hooks(timeline_hooks_.get());
  }
  at::manual_seed(static_cast<uint64_t>(t.seed) + 1 + static_cast<uint64_t>(info.rank));
  sampler_ = std::make_unique<DistributedSampler>(data_.train->size(), dp, dp_rank_,
                                                  static_cast<uint64_t>(t.seed));
  ckpt_root_ =
      cfg_.checkpoint.dir.empty() ? cfg_.logging.run_dir + "/checkpoints" : cfg_.checkpoint.dir;
  if (info.rank == 0)
    for (const auto& path : remove_unfinished_checkpoints(ckpt_root_))
      log_rank0("removed ", path,
                ": an unfinished checkpoint of a run that stopped while writing it");
  if (!cfg_.checkpoint.resume.empty()) resume();
}

int Trainer::agreed_stop_signal() {
  // Every rank must leave the loop at the same step, or the others wait in the next
  // collective: the largest signal number seen on any rank wins.
  const int local = stop_requested();
  Comm& world = mesh_->comm(Axis::kWorld);
  if (world.size() == 1) return local;
  at::Tensor t = at::full({1}, local, at::kInt);
  world.all_reduce(t, c10d::ReduceOp::MAX).wait();
  return t.item<int>();
}

Trainer::~Trainer() {
  if (timeline_hooks_) model_->remove_block_hooks(timeline_hooks_.get());
}

void Trainer::print_startup() {
  if (info_.rank != 0) return;
  std::string table = config_table(cfg_);
  log_rank0("strata train: resolved config\n", table);
  log_rank0("layout      ", mesh_->dims().to_string(), ", ranks from ", info_.source, ", ",
            threads_, " threads per rank");
  log_rank0("model       ", spec_.flavour, ": ", model_->num_parameters(), " parameters, ",
            model_->num_blocks(), " blocks");
  log_rank0("data        ", data_.description, ": ", data_.train->size(), " train samples");
  if (ddp_)
    log_rank0("ddp         ", ddp_->num_buckets(), " gradient buckets (cap ",
              cfg_.parallel.bucket_cap_mb, " MiB, first ", cfg_.parallel.first_bucket_mb,
              " MiB), comm hook ", ddp_->hook().name(),
              cfg_.parallel.find_unused_parameters ? ", finds unused parameters" : "");
  if (zero_) log_rank0("zero        ", zero_->describe());
  const auto& me = cfg_.memory;
  log_rank0("memory      precision ", me.precision,
            precision_ == Precision::kFp32 ? ""
            : me.master_weights            ? " (half parameters and gradients, fp32 master weights)"
                                           : " (fp32 parameters, half compute)",
            scaler_->enabled() ? c10::str(", loss scale ", scaler_->scale()) : "", ", recompute ",
            me.recompute,
            me.recompute == "every-k" ? c10::str(" (k=", me.recompute_k, ")") : std::string(),
            model_->segments().size() > 1 ? c10::str(", ", model_->segments().size(), " segments")
                                          : std::string());
  log_rank0("batch       ", cfg_.training.batch_size, " global = ", micro_, " micro x ", accum_,
            " accumulation x ", mesh_->dims().dp(), " dp");
}

double Trainer::average_over_dp(double v) {
  Comm& dp = mesh_->comm(Axis::kDp);
  if (dp.size() == 1) return v;
  at::Tensor t = at::full({1}, v, at::kDouble);
  dp.all_reduce(t).wait();
  return t.item<double>() / static_cast<double>(dp.size());
}

Batch Trainer::to_device(Batch b) const {
  if (device_.is_cpu()) return b;
  auto move = [&](at::Tensor& t) {
    if (t.defined()) t = t.to(device_, /*non_blocking=*/true);
  };
  move(b.input);
  move(b.target);
  move(b.token_type);
  return b;
}

std::optional<double> Trainer::check_gradients(int64_t step) {
  for (int64_t s : inject_inf_steps_) {
    if (s != step + 1 || params_.empty()) continue;
    at::NoGradGuard no_grad;
    if (zero_)
      zero_->inject_inf();
    else
      params_[0].param.mutable_grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
  }
  const double scale = scaler_->scale();
  // Under ZeRO each rank holds a shard of the gradients: the norm is all-reduced.
  const double norm2 = zero_ ? zero_->grad_norm_squared() : grad_norm_squared(params_);
  grad_norm_ = std::sqrt(norm2) / scale;
  skipped_ = false;
  if (scaler_->enabled()) {
    // Note [global overflow check]: every rank must skip together, or replicas
    // diverge; the flag is reduced over all ranks (dp, tp and pp), not only dp.
    at::Tensor found = at::full({1}, std::isfinite(norm2) ? 0.0 : 1.0, at::kFloat);
    Comm& world = mesh_->comm(Axis::kWorld);
    if (world.size() > 1) world.all_reduce(found, c10d::ReduceOp::MAX).wait();
    if (!scaler_->update(found.item<float>() > 0)) {
      skipped_ = true;
      log_rank0("step ", step + 1, ": inf/NaN in the gradients, step skipped on every rank; ",
                "loss scale ", scale, " -> ", scaler_->scale());
      return std::nullopt;
    }
  }
  const double clip = cfg_.training.grad_clip;
  const double coef = clip > 0 && grad_norm_ > clip ? clip / (grad_norm_ + 1e-6) : 1.0;
  return coef / scale;
}

double Trainer::train_step(int64_t step) {
  const auto& t = cfg_.training;
  double loss_sum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // The loss is multiplied by the loss scale (1 unless fp16) and divided over the
  // micro-steps, so the gradients are the scaled mean.
  const double backward_factor = scaler_->scale() / static_cast<double>(accum_);
  for (int64_t m = 0; m < accum_; ++m) {
    MemoryScope scope(Category::kActivations);
    Batch b = to_device(data_.train->get(sampler_->next(micro_)));
    // Micro-steps before the last accumulate locally; the last one's backward
    // reduces the sum over dp (DDP's no_sync).
    std::optional<DistributedDataParallel::NoSync> no_sync;
    if (ddp_ && m + 1 < accum_) no_sync.emplace(*ddp_);
    if (zero_) zero_->set_sync(m + 1 == accum_);
    STRATA_TIMELINE_MARK("micro[", m, "].forward.begin");
    at::Tensor loss = forward_loss(b);
    STRATA_TIMELINE_MARK("micro[", m, "].loss");
    (loss * backward_factor).backward();
    STRATA_TIMELINE_MARK("micro[", m, "].backward.end");
    loss_sum += loss.item<double>();
  }
  const auto t1 = std::chrono::steady_clock::now();
  {
    // The gradient-norm pass and the update's transients are the optimizer's.
    MemoryScope scope(Category::kOptimizer);
    STRATA_TIMELINE_MARK("optimizer.begin");
    if (auto factor = check_gradients(step)) {
      const double lr = lr_at(step, t.steps, t.warmup_steps, t.lr, t.min_lr);
      if (zero_)
        zero_->step(lr, *factor);
      else
        opt_->step(lr, *factor);
    }
  }
  if (zero_)
    zero_->zero_grad();
  else if (ddp_)
    ddp_->zero_grad();  // Note [DDP zero_grad]
  else
    opt_->zero_grad();
  STRATA_TIMELINE_MARK("optimizer.end");
  const auto t2 = std::chrono::steady_clock::now();
  phase_ms_ = {std::chrono::duration<double, std::milli>(t1 - t0).count(),
               std::chrono::duration<double, std::milli>(t2 - t1).count()};
  return average_over_dp(loss_sum / static_cast<double>(accum_));
}

at::Tensor Trainer::forward_loss(const Batch& b) {
  AutocastScope autocast(device_.type(), compute_dtype_);
  auto f = [&] { return model_->forward_loss(b); };
  if (zero_) return zero_->forward_loss(f);
  if (ddp_) return ddp_->forward_loss(f);
  return f();
}

double Trainer::evaluate() {
  if (!data_.eval) return NAN;
  at::NoGradGuard no_grad;
  model_->eval();
  DistributedSampler s(data_.eval->size(), mesh_->dims().dp(), dp_rank_, 0, /*shuffle=*/false);
  const auto idx = s.epoch_indices(0);
  double sum = 0;
  int64_t n = 0;
  for (int64_t b = 0; b < cfg_.training.eval_batches; ++b) {
    const auto begin = static_cast<size_t>(b * micro_);
    if (begin + static_cast<size_t>(micro_) > idx.size()) break;
    MemoryScope scope(Category::kActivations);
    std::vector<int64_t> chunk(idx.begin() + static_cast<int64_t>(begin),
                               idx.begin() + static_cast<int64_t>(begin) + micro_);
    sum += forward_loss(to_device(data_.eval->get(chunk))).item<double>();
    ++n;
  }
  model_->train();
  return average_over_dp(n ? sum / static_cast<double>(n) : NAN);
}

void Trainer::save(int64_t step) {
  const std::string tmp = ckpt_root_ + "/" + checkpoint_dir_name(step) + ".tmp";
  std::vector<TensorPiece> pieces;
  // ZeRO gathers its shards (every rank takes part) into the same full tensors.
  if (zero_) pieces = zero_->gathered_state();
  if (info_.rank == 0 && !zero_) {
    auto& st = opt_->state();
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& name = params_[i].name;
      // The fp32 master when there is one: a checkpoint keeps full precision.
      const at::Tensor& w = st[i].master.defined() ? st[i].master : params_[i].param;
      pieces.push_back({"model." + name, w, {}, {}});
      pieces.push_back({"optim." + name + ".exp_avg", st[i].exp_avg, {}, {}});
      pieces.push_back({"optim." + name + ".exp_avg_sq", st[i].exp_avg_sq, {}, {}});
      pieces.push_back({"optim." + name + ".step", at::full({1}, st[i].step, at::kLong), {}, {}});
    }
  }
  if (info_.rank == 0) {
    for (auto& np : frozen_) pieces.push_back({"model." + np.name, np.param, {}, {}});
    // BatchNorm running statistics and other buffers: model state that is not a parameter.
    for (auto& b : model_->named_buffers())
      pieces.push_back({"buffer." + b.key(), b.value(), {}, {}});
    if (scaler_->enabled()) {
      const auto sc = scaler_->state();
      pieces.push_back({"scaler.state",
                        at::tensor({sc.scale, static_cast<double>(sc.growth_tracker),
                                    static_cast<double>(sc.skipped)},
                                   at::kDouble),
                        {},
                        {}});
    }
  }
  at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  pieces.push_back({"rng.cpu.rank" + std::to_string(info_.rank), rng, {}, {}});
  if (info_.rank == 0) fs::create_directories(tmp);
  Comm& world = mesh_->comm(Axis::kWorld);
  world.barrier();
  write_shard(tmp, info_.rank, pieces);
  world.barrier();
  if (info_.rank == 0) {
    auto s = sampler_->state();
    nlohmann::json meta = {
        {"format", 1},
        {"step", step},
        {"sampler", {{"epoch", s.epoch}, {"offset", s.offset}}},
        {"layout",
         {{"dp", mesh_->dims().dp()}, {"tp", mesh_->dims().tp()}, {"pp", mesh_->dims().pp()}}},
        {"world_size", info_.world_size},
        {"config", config_toml(cfg_)}};
    finalize_checkpoint(ckpt_root_, step, meta, cfg_.checkpoint.keep);
  }
  world.barrier();
}

void Trainer::resume() {
  const std::string dir = resolve_checkpoint(ckpt_root_, cfg_.checkpoint.resume);
  if (dir.empty()) {
    log_rank0("checkpoint.resume=latest: no checkpoint under ", ckpt_root_, ", starting fresh");
    return;
  }
  CheckpointReader r(dir);
  const auto& layout = r.meta()["layout"];
  STRATA_CHECK(layout["dp"] == mesh_->dims().dp() && layout["tp"] == mesh_->dims().tp() &&
                   layout["pp"] == mesh_->dims().pp(),
               "checkpoint ", dir, " was written with dp=", layout["dp"].dump(),
               " tp=", layout["tp"].dump(), " pp=", layout["pp"].dump(), " but this run is ",
               mesh_->dims().to_string(), "; resume with the same layout");
  if (zero_) zero_->load_state(r);
  for (size_t i = 0; opt_ && i < params_.size(); ++i) {
    auto& st = opt_->state();
    const auto& name = params_[i].name;
    if (st[i].master.defined()) {
      r.read("model." + name, st[i].master);
      at::NoGradGuard no_grad;
      params_[i].param.copy_(st[i].master);
    } else {
      r.read("model." + name, params_[i].param);
    }
    r.read("optim." + name + ".exp_avg", st[i].exp_avg);
    r.read("optim." + name + ".exp_avg_sq", st[i].exp_avg_sq);
    at::Tensor s = at::zeros({1}, at::kLong);
    r.read("optim." + name + ".step", s);
    st[i].step = s.item<int64_t>();
  }
  for (auto& np : frozen_) r.read("model." + np.name, np.param);
  if (scaler_->enabled()) {
    STRATA_CHECK(r.has("scaler.state"), "checkpoint ", dir,
                 " has no loss-scaler state (it was not written by an fp16 run); resume with "
                 "the precision it was written with");
    at::Tensor sc = at::zeros({3}, at::kDouble);
    r.read("scaler.state", sc);
    scaler_->set_state({sc[0].item<double>(), static_cast<int64_t>(sc[1].item<double>()),
                        static_cast<int64_t>(sc[2].item<double>())});
  }
  for (auto& b : model_->named_buffers()) r.read("buffer." + b.key(), b.value());
  const std::string rng_name = "rng.cpu.rank" + std::to_string(info_.rank);
  at::Tensor rng = at::empty(r.global_shape(rng_name), at::kByte);
  r.read(rng_name, rng);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng);
  sampler_->set_state({r.meta()["sampler"]["epoch"], r.meta()["sampler"]["offset"]});
  start_step_ = r.meta()["step"];
  log_rank0("resumed from ", dir, " at step ", start_step_);
}

void Trainer::write_timeline(int64_t step, const std::vector<TimelineSample>& samples) {
  fs::create_directories(cfg_.logging.run_dir);
  const std::string path = cfg_.logging.run_dir + "/memory_timeline.jsonl";
  // A fresh run starts the file; a resumed one appends.
  std::ofstream out(path,
                    step == start_step_ + 1 && start_step_ == 0 ? std::ios::trunc : std::ios::app);
  for (const auto& s : samples) {
    nlohmann::json j = {{"step", step}, {"t_ms", s.t_ms}, {"phase", s.phase}};
    j["bytes"] = category_json(s.bytes);
    out << j.dump() << "\n";
  }
}

TrainSummary Trainer::run() {
  install_stop_handlers();
  print_startup();
  const auto& t = cfg_.training;
  TrainSummary out;
  out.first_step = start_step_;
  std::unique_ptr<MetricsLog> log;
  if (info_.rank == 0) {
    fs::create_directories(cfg_.logging.run_dir);
    // The resolved config, dp filled in: `strata estimate --compare` and `strata
    // report` read it back.
    Config resolved = cfg_;
    resolved.parallel.dp = mesh_->dims().dp();
    write_file_atomic(cfg_.logging.run_dir + "/config.toml", config_toml(resolved));
    log = std::make_unique<MetricsLog>(cfg_.logging.run_dir + "/metrics.jsonl", start_step_ > 0);
    out.metrics_path = log->path();
  }
  Progress progress(cfg_.logging.progress, t.steps, cfg_.logging.log_interval, info_.rank == 0);
  const double tokens_per_step = static_cast<double>(t.batch_size * model_->tokens_per_sample());
  const double flops_per_step = model_->flops_per_sample() * static_cast<double>(t.batch_size);
  auto run_start = std::chrono::steady_clock::now();
  CommStats::get().take();
  for (int64_t step = start_step_; step < t.steps; ++step) {
    reset_memory_peaks();
    reset_rss_peak();
    if (device_.is_cuda()) reset_cuda_peaks(device_.index());
    const bool timeline =
        timeline_hooks_ && step - start_step_ < cfg_.logging.memory_timeline_steps;
    if (timeline) {
      MemoryTimeline::get().start();
      MemoryTimeline::get().mark("step.begin");
    }
    auto t0 = std::chrono::steady_clock::now();
    const double loss = train_step(step);
    if (timeline) {
      MemoryTimeline::get().mark("step.end");
      write_timeline(step + 1, MemoryTimeline::get().stop());
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const MemoryStats mem = memory_stats();
    const CommTotals comm = CommStats::get().take();
    out.losses.push_back(loss);
    STRATA_CHECK(std::isfinite(loss) || skipped_, "loss became ", loss, " at step ", step + 1,
                 "; lower training.lr or raise training.warmup_steps");
    const double lr = lr_at(step, t.steps, t.warmup_steps, t.lr, t.min_lr);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    const double eta = elapsed / static_cast<double>(step + 1 - start_step_) *
                       static_cast<double>(t.steps - step - 1);
    nlohmann::json rec = {
        {"step", step + 1},
        {"loss", loss},
        {"lr", lr},
        {"step_ms", secs * 1000},
        {"tokens_per_s", tokens_per_step / secs},
        {"samples_per_s", static_cast<double>(t.batch_size) / secs},
        {"mfu", flops_per_step / secs / (peak_flops_ * static_cast<double>(info_.world_size))},
        {"fwd_bwd_ms", phase_ms_[0]},
        {"optim_ms", phase_ms_[1]},
        {"comm_ms", comm.ms},
        {"comm_bytes", comm.bytes},
        {"grad_norm", grad_norm_},
        {"mem_current", category_json(mem.current)},
        {"mem_peak", category_json(mem.peak)},
        {"mem_peak_total", mem.total_peak},
        {"mem_at_peak", category_json(mem.at_total_peak)},
        {"rss", {{"peak", rss_peak_bytes()}, {"current", rss_bytes()}, {"base", rss_base_}}}};
    if (scaler_->enabled()) {
      rec["loss_scale"] = scaler_->scale();
      rec["skipped"] = skipped_;
      rec["skipped_steps"] = scaler_->state().skipped;
    }
    if (ddp_) {
      const DdpStats d = ddp_->take_stats();
      rec["ddp"] = {{"bytes_sent", d.bytes_sent},
                    {"bytes_uncompressed", d.bytes_uncompressed},
                    {"comm_ms", d.comm_ms},
                    {"hidden_fraction", d.hidden_fraction()}};
    }
    if (zero_) {
      const ZeroStats z = zero_->take_stats();
      rec["zero"] = {{"stage", zero_->stage()},
                     {"gathers", z.gathers},
                     {"reduce_scatters", z.reduce_scatters},
                     {"bytes_gathered", z.bytes_gathered},
                     {"bytes_reduced", z.bytes_reduced},
                     {"wait_ms", z.wait_ms}};
    }
    if (auto dev = device_.is_cuda() ? cuda_memory_stats(device_.index()) : std::nullopt) {
      rec["cuda_mem"] = {{"allocated", dev->allocated},
                         {"peak_allocated", dev->peak_allocated},
                         {"reserved", dev->reserved},
                         {"peak_reserved", dev->peak_reserved}};
    }
    const bool last = step + 1 == t.steps;
    if (t.eval_interval > 0 && ((step + 1) % t.eval_interval == 0 || last)) {
      const double ev = evaluate();
      rec["eval_loss"] = ev;
      out.eval_loss = ev;
      progress.message(c10::str("step ", step + 1, ": eval loss ", ev));
    }
    if (log) log->write(rec);
    progress.update(step + 1, loss, tokens_per_step / secs, lr, eta);
    const bool periodic =
        cfg_.checkpoint.interval > 0 && (step + 1) % cfg_.checkpoint.interval == 0;
    const int stop = last ? 0 : agreed_stop_signal();
    const bool checkpointing = cfg_.checkpoint.interval > 0 || cfg_.checkpoint.save_final;
    if (periodic || (last && cfg_.checkpoint.save_final) || (stop && checkpointing)) {
      save(step + 1);
      out.checkpoint_dir = ckpt_root_ + "/" + checkpoint_dir_name(step + 1);
    }
    if (stop) {
      out.stop_signal = stop;
      progress.message(c10::str("stopping after step ", step + 1, " on ",
                                stop == SIGINT ? "SIGINT" : "SIGTERM",
                                checkpointing ? " (checkpoint written)" : ""));
      break;
    }
  }
  progress.finish();
  return out;
}

}  // namespace strata
