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

#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/core/stop_signal.h"
#include "strata/distributed/heartbeat.h"
#include "strata/memory/device_stats.h"
#include "strata/memory/process_memory.h"
#include "strata/memory/timeline.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/parallel/pipeline/executor.h"
#include "strata/plan/plan.h"
#include "strata/train/checkpoint.h"
#include "strata/train/faults.h"
#include "strata/train/fresh_optimizer.h"
#include "strata/train/step_trace.h"

namespace strata {

namespace fs = std::filesystem;

namespace {
// Note [CPU peak FLOPs]: one AVX2 core retires two 8-wide fp32 FMAs a cycle (32
// FLOPs); at ~2.5 GHz that is 80 GFLOP/s a thread. Used for MFU unless
// logging.peak_tflops names the device's real peak.
constexpr double kCpuFlopsPerThread = 2.5e9 * 32;

}  // namespace

Trainer::Trainer(Config cfg, const WorldInfo& info, Extensions ext)
    : cfg_(std::move(cfg)), info_(info), ext_(std::move(ext)) {
  validate_config(cfg_);
  const auto& t = cfg_.training;
  const auto& p = cfg_.parallel;
  ParallelDims dims(p.dp, p.tp, p.pp, info.world_size);
  set_log_rank(static_cast<int>(info.rank));
  threads_ = threads_per_rank(t.threads, info.local_world_size);
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
  mesh_ = std::make_unique<Mesh>(info, dims, device, timeout());
  dp_rank_ = mesh_->coord().dp;

  // Note [init_from]: the weights decide the model's shape (a Hugging Face folder's was
  // applied by the command line).
  // The source is opened once: its index serves the shape now and the weights later.
  std::unique_ptr<PieceReader> init_source;
  if (!cfg_.checkpoint.init_from.empty() && !ext_.open_weights) {
    auto src = std::make_unique<CheckpointReader>(locate_checkpoint(cfg_.checkpoint.init_from));
    if (src->meta().contains("model") && !ext_.model)
      apply_spec_json(cfg_.model, src->meta()["model"]);
    init_source = std::move(src);
  }
  if (ext_.data) {
    STRATA_CHECK(ext_.data->train && ext_.data->train->size() > 0,
                 "the program's training dataset is empty; give Strata one with samples");
    data_ = *ext_.data;
  } else {
    data_ = open_data_source(cfg_);
  }
  STRATA_CHECK(!ext_.model || (ext_.model->family == Family::kCustom && ext_.model->build),
               "a program's own model needs Family::kCustom and a builder");
  // The same checks `strata estimate` makes (Note [one validation path]).
  const RunPlan plan =
      plan_run(cfg_, info.world_size, data_.shape, ext_.model ? &*ext_.model : nullptr);
  spec_ = plan.spec;
  if (!ext_.data) build_datasets(data_, cfg_, spec_);
  micro_ = plan.micro_batch;
  accum_ = plan.accum;
  const int64_t dp = dims.dp();

  rss_base_ = rss_bytes();  // the runtime, libraries and data, before any model state
  pm_ = parallelize(spec_, *mesh_, cfg_, device_);
  // One stage: F0 B0 F1 B1 ...; a pipeline: this rank's list of its schedule.
  pipeline_ = dims.pp() == 1 && cfg_.parallel.pp_virtual == 1
                  ? single_stage_schedule(accum_)
                  : pipeline_schedule(parse_schedule_kind(cfg_.parallel.pp_schedule), dims.pp(),
                                      accum_, cfg_.parallel.pp_virtual);
  schedule_ = pipeline_[static_cast<size_t>(mesh_->coord().pp)];
  sent_gradients_done_ = sent_gradients_done(pipeline_, mesh_->coord().pp);
  scaler_ = std::make_unique<LossScaler>(LossScalerOptions{
      pm_.precision == Precision::kFp16, cfg_.memory.loss_scale_init, cfg_.memory.loss_scale_growth,
      cfg_.memory.loss_scale_backoff, cfg_.memory.loss_scale_interval});
  scaler_->set_writes_state(info.rank == 0);
  inject_inf_steps_ = inject_inf_steps(info.rank);
  if (info.rank == 0 && cfg_.logging.memory_timeline_steps > 0 && cfg_.memory.track) {
    // Added after ZeRO's hooks: its gathers come before the forward marks and its
    // frees after them.
    timeline_hooks_ = std::make_unique<TimelineBlockHooks>();
    pm_.parts[0]->add_block_hooks(timeline_hooks_.get());
  }
  // Dropout's stream per data replica: the tp ranks of one replica drop the same
  // elements of what they all hold (the replicated activations). At tp = 1 this is
  // the rank.
  const Coord c = mesh_->coord();
  at::manual_seed(static_cast<uint64_t>(t.seed) + 1 +
                  static_cast<uint64_t>(c.pp * dims.dp() + c.dp));
  sampler_ = std::make_unique<DistributedSampler>(data_.train->size(), dp, dp_rank_,
                                                  static_cast<uint64_t>(t.seed));
  sampler_state_ = std::make_unique<SamplerState>(*sampler_, dp, info.rank == 0);
  rng_state_ = std::make_unique<RngState>(info.rank);
  ckpt_root_ =
      cfg_.checkpoint.dir.empty() ? cfg_.logging.run_dir + "/checkpoints" : cfg_.checkpoint.dir;
  if (info.rank == 0)
    for (const auto& path : remove_unfinished_checkpoints(ckpt_root_))
      log_rank0("removed ", path,
                ": an unfinished checkpoint of a run that stopped while writing it");
  fault_ = fault_from_env(info.rank);
  checkpointer_ = std::make_unique<Checkpointer>(
      Checkpointer::Options{ckpt_root_, cfg_.checkpoint.keep, cfg_.checkpoint.async, info.rank,
                            info.world_size, timeout(), fault_},
      mesh_->comm(Axis::kWorld), mesh_->store());
  // Note [restarts]: a rank the launcher started again resumes from the newest complete
  // checkpoint, whatever the config named (that one may be older than what the run
  // wrote before it failed).
  const int64_t restart = get_env_int("STRATA_RESTART").value_or(0);
  if (restart > 0 && !resolve_checkpoint(ckpt_root_, "latest").empty()) {
    resume("latest");
  } else if (!cfg_.checkpoint.resume.empty()) {
    resume(cfg_.checkpoint.resume);
  } else if (!cfg_.checkpoint.init_from.empty()) {
    init_from(cfg_.checkpoint.init_from, std::move(init_source));
  } else if (restart > 0) {
    log_rank0("restart ", restart, ": no checkpoint under ", ckpt_root_,
              " yet, starting again from step 0");
  }
  if (get_env_int("STRATA_MAX_RESTARTS").value_or(0) > 0 && cfg_.checkpoint.interval == 0)
    log_rank0(
        "warning: restarts are on but checkpoint.interval is 0: a restart begins again "
        "from step 0; set checkpoint.interval to lose at most that many steps");
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
  if (timeline_hooks_) pm_.parts[0]->remove_block_hooks(timeline_hooks_.get());
}

std::vector<Stateful*> Trainer::components() {
  // The model first: it refuses an incompatible checkpoint before anything is read.
  return {pm_.model_state.get(), pm_.optimizer.get(),  pm_.grad_sync.get(),
          scaler_.get(),         sampler_state_.get(), rng_state_.get()};
}

void Trainer::print_startup() {
  if (info_.rank != 0) return;
  std::string table = config_table(cfg_);
  log_rank0("strata train: resolved config\n", table);
  log_rank0("layout      ", mesh_->dims().to_string(), ", ranks from ", info_.source, ", ",
            threads_, " threads per rank");
  log_rank0("model       ", spec_.flavour, ": ", pm_.num_parameters(), " parameters",
            mesh_->dims().tp() > 1 ? c10::str(" on this rank (tp=", mesh_->dims().tp(), ")") : "",
            ", ", spec_.n_layer > 0 ? spec_.n_layer : pm_.parts[0]->num_blocks(), " blocks");
  log_rank0("data        ", data_.description, ": ", data_.train->size(), " train samples");
  log_rank0("sync        ", pm_.grad_sync->describe());
  const auto& me = cfg_.memory;
  log_rank0("memory      precision ", me.precision,
            pm_.precision == Precision::kFp32 ? ""
            : me.master_weights ? " (half parameters and gradients, fp32 master weights)"
                                : " (fp32 parameters, half compute)",
            scaler_->enabled() ? c10::str(", loss scale ", scaler_->scale()) : "", ", recompute ",
            me.recompute,
            me.recompute == "every-k" ? c10::str(" (k=", me.recompute_k, ")") : std::string(),
            pm_.parts[0]->segments().size() > 1
                ? c10::str(", ", pm_.parts[0]->segments().size(), " segments")
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
    if (s != step + 1) continue;
    pm_.grad_sync->inject_inf();
  }
  const double scale = scaler_->scale();
  // Sharded gradients (ZeRO) all-reduce their norm inside grad_norm_squared.
  const double norm2 = pm_.grad_sync->grad_norm_squared();
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
  const auto t0 = std::chrono::steady_clock::now();
  // The loss is multiplied by the loss scale (1 unless fp16) and divided over the
  // micro-steps, so the gradients are the scaled mean.
  StepContext ctx{pm_.parts, *pm_.grad_sync, device_.type(), pm_.compute_dtype,
                  scaler_->scale() / static_cast<double>(accum_)};
  step_timeline_.clear();
  ctx.timeline = &step_timeline_;  // Note [step timeline]
  const bool pipeline = mesh_->dims().pp() > 1;
  if (pipeline) {
    ctx.pp = &mesh_->comm(Axis::kPp);
    ctx.activation_shape = stage_activation_shape();
    ctx.activation_dtype = pm_.compute_dtype;
    ctx.sent_gradients_done = &sent_gradients_done_;
  }
  // Every stage draws the step's micro-batches in order (a pipeline's parts forward
  // each once per chunk): the first use of micro-batch m takes the sampler's next.
  std::vector<Batch> batches;
  const double loss_sum = run_stage_actions(schedule_, accum_, ctx, [&](int64_t m) {
    while (static_cast<int64_t>(batches.size()) <= m)
      batches.push_back(to_device(data_.train->get(sampler_->next(micro_))));
    return batches[static_cast<size_t>(m)];
  });
  schedule_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  pm_.grad_sync->finalize();
  const auto t1 = std::chrono::steady_clock::now();
  {
    // The gradient-norm pass and the update's transients are the optimizer's.
    MemoryScope scope(Category::kOptimizer);
    STRATA_TIMELINE_MARK("optimizer.begin");
    if (auto factor = check_gradients(step))
      pm_.optimizer->step(lr_at(step, t.steps, t.warmup_steps, t.lr, t.min_lr), *factor);
  }
  pm_.grad_sync->zero_grad();  // Note [DDP zero_grad]
  STRATA_TIMELINE_MARK("optimizer.end");
  const auto t2 = std::chrono::steady_clock::now();
  phase_ms_ = {std::chrono::duration<double, std::milli>(t1 - t0).count(),
               std::chrono::duration<double, std::milli>(t2 - t1).count()};
  return average_over_dp(from_last_stage(loss_sum) / static_cast<double>(accum_));
}

std::vector<int64_t> Trainer::stage_activation_shape() const {
  // The residual stream between blocks: under sequence parallelism each tp rank holds
  // its seq_len / tp positions, and sends them to the same tp rank of the next stage.
  const int64_t tp = mesh_->dims().tp();
  const bool sp = cfg_.parallel.sequence_parallel && tp > 1;
  if (spec_.family == Family::kCustom) {  // the program says (Note [user models])
    std::vector<int64_t> shape = {micro_};
    shape.insert(shape.end(), spec_.activation_shape.begin(), spec_.activation_shape.end());
    return shape;
  }
  return {micro_, sp ? spec_.seq_len / tp : spec_.seq_len, spec_.d_model};
}

double Trainer::from_last_stage(double v) {
  // The loss lives on the last stage (pp rank p-1); every rank logs it.
  Comm& pp = mesh_->comm(Axis::kPp);
  if (pp.size() == 1) return v;
  at::Tensor t = at::full({1}, v, at::kDouble);
  pp.broadcast(t, pp.size() - 1).wait();
  return t.item<double>();
}

double Trainer::evaluate() {
  if (!data_.eval) return NAN;
  at::NoGradGuard no_grad;
  for (auto& part : pm_.parts) part->eval();
  // The first eval_batches micro-batches of this replica's share, in order.
  DistributedSampler s(data_.eval->size(), mesh_->dims().dp(), dp_rank_, 0, /*shuffle=*/false);
  double sum = 0;
  int64_t n = 0;
  for (int64_t b = 0; b < cfg_.training.eval_batches; ++b) {
    if ((b + 1) * micro_ > s.per_replica()) break;
    MemoryScope scope(Category::kActivations);
    heartbeat::tick();
    std::vector<int64_t> chunk;
    for (int64_t k = b * micro_; k < (b + 1) * micro_; ++k) chunk.push_back(s.index_at(0, k));
    const Batch batch = to_device(data_.eval->get(chunk));
    AutocastScope autocast(device_.type(), pm_.compute_dtype);
    sum += forward_only(batch);
    ++n;
  }
  for (auto& part : pm_.parts) part->train();
  return average_over_dp(from_last_stage(n ? sum / static_cast<double>(n) : NAN));
}

double Trainer::forward_only(const Batch& batch) {
  if (mesh_->dims().pp() == 1)
    return pm_.grad_sync->forward([&] { return pm_.parts[0]->forward_loss(batch); }).item<double>();
  // Through the virtual stages in order: this rank runs its own, receiving the
  // previous stage's activations and sending its output on; the last returns the loss.
  Comm& pp = mesh_->comm(Axis::kPp);
  const int64_t p = pp.size(), stages = p * static_cast<int64_t>(pm_.parts.size());
  double loss = 0;
  for (int64_t vs = 0; vs < stages; ++vs) {
    if (vs % p != pp.rank()) continue;
    at::Tensor x;
    if (vs > 0) {
      x = at::empty(stage_activation_shape(),
                    at::TensorOptions().dtype(pm_.compute_dtype).device(device_));
      pp.recv(x, (vs - 1) % p, static_cast<int>(vs)).wait();
    }
    at::Tensor out = pm_.parts[static_cast<size_t>(vs / p)]->forward_part(x, batch);
    if (vs == stages - 1) {
      loss = out.item<double>();
    } else {
      at::Tensor send = out.to(pm_.compute_dtype).contiguous();
      pp.send(send, (vs + 1) % p, static_cast<int>(vs + 1)).wait();
    }
  }
  return loss;
}

void Trainer::save(int64_t step) {
  nlohmann::json meta;
  if (info_.rank == 0)
    meta = {{"format", 2},
            {"step", step},
            {"layout",
             {{"dp", mesh_->dims().dp()}, {"tp", mesh_->dims().tp()}, {"pp", mesh_->dims().pp()}}},
            {"zero", cfg_.parallel.zero},
            {"world_size", info_.world_size},
            {"model", spec_json(spec_)},
            {"config", config_toml(cfg_)}};
  save_stats_ = checkpointer_->save(step, components(), meta);
}

std::chrono::milliseconds Trainer::timeout() const {
  return std::chrono::milliseconds(static_cast<int64_t>(cfg_.parallel.timeout_s * 1000));
}

void Trainer::init_from(const std::string& path, std::unique_ptr<PieceReader> src) {
  if (!src) src = ext_.open_weights(path, spec_);  // a Hugging Face folder
  // Weights and buffers from the source, the optimizer's state fresh (Note [init_from]);
  // the model refuses another model's tensors with one line first.
  FreshOptimizerReader in(*src);
  pm_.model_state->load_state(in);
  pm_.optimizer->load_state(in);
  log_rank0("initialised the weights from ", path, " (optimizer fresh, step 0)");
}

void Trainer::resume(const std::string& spec) {
  const std::string dir = resolve_checkpoint(ckpt_root_, spec);
  if (dir.empty()) {
    log_rank0("checkpoint.resume=latest: no checkpoint under ", ckpt_root_, ", starting fresh");
    return;
  }
  CheckpointReader r(dir);
  STRATA_CHECK(r.meta().value("format", 1) >= 2, "checkpoint ", dir,
               " was written by an earlier Strata (format 1: gathered, one layout); resume it "
               "with the release that wrote it");
  // Any layout loads any other: each component reads the pieces it needs now.
  for (Stateful* c : components()) c->load_state(r);
  start_step_ = r.meta()["step"];
  const auto& l = r.meta()["layout"];
  log_rank0("resumed from ", dir, " at step ", start_step_, " (written at dp=", l["dp"].dump(),
            " tp=", l["tp"].dump(), " pp=", l["pp"].dump(), " zero=", r.meta().value("zero", 0),
            "; now ", mesh_->dims().to_string(), " zero=", cfg_.parallel.zero, ")",
            rng_state_->restored() ? "" : "; this rank's dropout stream starts fresh");
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

Trainer::RankPeak Trainer::highest_peak(int64_t mine) {
  // Note [every rank's peak]: the log is rank 0's, but ranks differ (the first and last
  // pipeline stages, ZeRO's uneven shards, the vocabulary slice), and a memory limit
  // holds for each device: the step's highest tracked peak over the world and its rank
  // go into the record beside rank 0's own.
  Comm& world = mesh_->comm(Axis::kWorld);
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device_);
  at::Tensor local = at::full({1}, mine, opts);
  at::Tensor all = at::empty({world.size()}, opts);
  world.all_gather(all, local).wait();
  const at::Tensor peaks = all.cpu();
  const int64_t rank = peaks.argmax().item<int64_t>();
  return {peaks[rank].item<int64_t>(), rank};
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
    // The partition the run used (auto's may come from a profile of this machine).
    if (!pm_.stage_blocks.empty())
      resolved.parallel.pp_partition = c10::Join(",", pm_.stage_blocks);
    write_file_atomic(cfg_.logging.run_dir + "/config.toml", config_toml(resolved));
    log = std::make_unique<MetricsLog>(cfg_.logging.run_dir + "/metrics.jsonl", start_step_);
    out.metrics_path = log->path();
  }
  Progress progress(cfg_.logging.progress, t.steps, cfg_.logging.log_interval, info_.rank == 0);
  Model& model = *pm_.parts[0];
  const double tokens_per_step = static_cast<double>(t.batch_size * model.tokens_per_sample());
  const double flops_per_step = model.flops_per_sample() * static_cast<double>(t.batch_size);
  auto run_start = std::chrono::steady_clock::now();
  CommStats::get().take();
  // Note [heartbeat]: from here on the launcher watches this rank's progress.
  heartbeat::start(info_.rank, timeout());
  heartbeat::started(start_step_);
  for (int64_t step = start_step_; step < t.steps; ++step) {
    heartbeat::set_step(step + 1);
    if (fault_ && fault_->step == step + 1 && fault_->kind != FaultKind::kKillInWrite)
      trigger_fault(*fault_);
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
    // After the step's figures: the gather is not part of the step.
    const StepTimeline timeline_all =
        gather_step_timeline(mesh_->comm(Axis::kPp), step_timeline_, schedule_ms_ / 1e3);
    const RankPeak highest = highest_peak(mem.total_peak);
    CommStats::get().take();
    if (log && step + 1 == cfg_.logging.trace_step)
      write_file_atomic(cfg_.logging.run_dir + "/trace.json",
                        chrome_trace(timeline_all.ranks).dump());
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
        {"comm_axes", comm_axes_json(comm)},
        {"grad_norm", grad_norm_},
        {"mem_current", category_json(mem.current)},
        {"mem_peak", category_json(mem.peak)},
        {"mem_peak_total", mem.total_peak},
        {"mem_peak_max", {{"bytes", highest.bytes}, {"rank", highest.rank}}},
        {"mem_at_peak", category_json(mem.at_total_peak)},
        {"rss", {{"peak", rss_peak_bytes()}, {"current", rss_bytes()}, {"base", rss_base_}}}};
    if (mesh_->dims().pp() > 1) rec["pp"] = step_timeline_json(timeline_all, pipeline_);
    if (scaler_->enabled()) {
      rec["loss_scale"] = scaler_->scale();
      rec["skipped"] = skipped_;
      rec["skipped_steps"] = scaler_->state().skipped;
    }
    const nlohmann::json sync_stats = pm_.grad_sync->stats();
    if (sync_stats.is_object()) rec.update(sync_stats);
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
    const bool periodic =
        cfg_.checkpoint.interval > 0 && (step + 1) % cfg_.checkpoint.interval == 0;
    const int stop = last ? 0 : agreed_stop_signal();
    const bool checkpointing = cfg_.checkpoint.interval > 0 || cfg_.checkpoint.save_final;
    if (periodic || (last && cfg_.checkpoint.save_final) || (stop && checkpointing)) {
      save(step + 1);
      out.checkpoint_dir = ckpt_root_ + "/" + checkpoint_dir_name(step + 1);
      rec["checkpoint"] = save_stats_;
    }
    if (auto written = checkpointer_->take_written()) rec["checkpoint_written"] = *written;
    if (log) log->write(rec);
    progress.update(step + 1, loss, tokens_per_step / secs, lr, eta);
    if (stop) {
      out.stop_signal = stop;
      progress.message(c10::str("stopping after step ", step + 1, " on ",
                                stop == SIGINT ? "SIGINT" : "SIGTERM",
                                checkpointing ? " (checkpoint written)" : ""));
      break;
    }
  }
  // The last save may still be in the background: the run ends when it is on disk.
  checkpointer_->wait();
  if (auto written = checkpointer_->take_written())
    log_rank0("checkpoint of step ", (*written)["step"].get<int64_t>(),
              " written in the background in ", std::llround((*written)["write_ms"].get<double>()),
              " ms");
  heartbeat::stop();
  progress.finish();
  return out;
}

}  // namespace strata
