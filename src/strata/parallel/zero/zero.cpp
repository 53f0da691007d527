#include "strata/parallel/zero/zero.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <map>
#include <unordered_map>

#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/memory/timeline.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/parallel/replicate.h"

namespace strata {

struct ZeroDataParallel::Group {
  int64_t unit = 0;
  std::vector<int64_t> params;  // indices into params_
  FlatLayout layout;
  at::Tensor full;        // stages 1-2: the full parameters (the parameters point into it)
  at::Tensor shard;       // this rank's parameter shard (stages 1-2: a view of full);
                          // undefined at stage 3 with offload (the host copy is the shard)
  at::Tensor full_grad;   // stage 1: full gradients (the parameters' .grad are views)
  at::Tensor shard_grad;  // this rank's averaged gradient shard
  size_t piece_begin = 0, piece_end = 0;  // the optimizer's pieces of this group
  // In flight.
  CommWork gather, reduce;
  at::Tensor gather_buf, gather_src, reduce_in, reduce_out;
};

struct ZeroDataParallel::Unit {
  std::vector<int64_t> groups;
  int64_t num_params = 0;
  int64_t pending = 0;  // parameters whose gradient is not ready in this backward
  bool gathered = false, gathering = false;
};

namespace {
// Note [reductions in flight]: a unit's reduction owns a flat copy of its gradients
// (and Gloo copies its input once more); if every unit's stayed alive until the end
// of backward, stage 2 would hold the full gradients after all. Launching one more
// than this many waits for the oldest first, so at most this many units' gradient
// copies exist at a time while backward still overlaps communication.
constexpr size_t kMaxReductionsInFlight = 1;

// Note [Gloo reductions]: Gloo's reduce_scatter takes longer than its all-reduce of
// the same buffer (28 MiB, 2 ranks, this machine: 52 ms against 32 ms), so on Gloo a
// unit's gradients are all-reduced in their flat buffer (which exists anyway) and
// this rank keeps its shard of the result; NCCL reduce-scatters. Memory is the same:
// the flat buffer is transient at stages 2-3 and is the gradients at stage 1.

// Stage 1 keeps full gradients, so micro-steps before the last need not reduce;
// stages 2 and 3 keep only a shard and must reduce each micro-step's gradients.
bool reduces_every_micro_step(int64_t stage) {
  return stage >= 2;
}
}  // namespace

ZeroOptions zero_options_from(const Config& cfg) {
  ZeroOptions o;
  o.stage = cfg.parallel.zero;
  o.offload = cfg.parallel.offload;
  o.prefetch = cfg.parallel.zero_prefetch;
  o.broadcast_buffers = cfg.parallel.broadcast_buffers;
  o.master_weights = cfg.memory.master_weights;
  const auto& t = cfg.training;
  o.adam = AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay};
  return o;
}

ZeroDataParallel::ZeroDataParallel(std::shared_ptr<Model> model, Comm& comm, ZeroOptions opts)
    : model_(std::move(model)), comm_(comm), opts_(opts) {
  STRATA_CHECK(opts_.stage >= 1 && opts_.stage <= 3, "parallel.zero=", opts_.stage,
               " is not a ZeRO stage; choose 0 (plain DDP), 1, 2 or 3");
  const int64_t n_blocks = model_->num_blocks();
  std::unordered_map<const void*, int64_t> block_of;
  for (int64_t b = 0; b < n_blocks; ++b)
    for (auto& p : model_->block(b).parameters()) block_of[p.unsafeGetTensorImpl()] = b;
  std::vector<at::Tensor> frozen;
  for (auto& item : model_->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) {
      frozen.push_back(item.value());
      continue;
    }
    names_.push_back(item.key());
    params_.push_back(item.value());
    auto tp = opts_.tp_params.find(item.key());
    info_.push_back(tp == opts_.tp_params.end() ? NamedParam{item.key(), item.value()}
                                                : tp->second);
    auto it = block_of.find(item.value().unsafeGetTensorImpl());
    unit_of_.push_back(it == block_of.end() ? n_blocks : it->second);
  }
  STRATA_CHECK(!params_.empty(), "ZeRO: the model has no parameter that requires a gradient");
  verify_same_parameters(comm_, names_, params_, "ZeRO");
  {
    std::vector<at::Tensor> all = params_;
    all.insert(all.end(), frozen.begin(), frozen.end());
    broadcast_coalesced(comm_, all, 0);
  }
  if (opts_.broadcast_buffers) broadcast_buffers(comm_, *model_, 0);

  // Made now, while every parameter has its bytes and its full shape.
  ready_hooks_ =
      std::make_unique<GradReadyHooks>(params_, names_, [this](int64_t i) { mark_ready(i); });

  // Units (blocks, then the root), each split into one flat group per dtype.
  const int64_t world = comm_.size(), rank = comm_.rank();
  for (int64_t u = 0; u <= n_blocks; ++u) units_.push_back(std::make_unique<Unit>());
  std::vector<ShardPiece> pieces;
  at::NoGradGuard no_grad;
  for (int64_t u = 0; u <= n_blocks; ++u) {
    std::map<int, std::vector<int64_t>> by_dtype;
    for (size_t i = 0; i < params_.size(); ++i)
      if (unit_of_[i] == u)
        by_dtype[static_cast<int>(params_[i].scalar_type())].push_back(static_cast<int64_t>(i));
    for (auto& [dtype, members] : by_dtype) {
      auto g = std::make_unique<Group>();
      g->unit = u;
      g->params = members;
      std::vector<int64_t> numels;
      for (int64_t i : members) numels.push_back(params_[static_cast<size_t>(i)].numel());
      g->layout = flat_layout(numels, world);
      const auto& l = g->layout;
      const at::Tensor& first = params_[static_cast<size_t>(members.front())];
      at::Tensor flat;
      {
        MemoryScope scope(opts_.stage == 3 ? Category::kCommBuffers : Category::kParameters);
        flat = at::zeros({l.padded}, first.options());
        for (size_t k = 0; k < members.size(); ++k)
          flat.narrow(0, l.offsets[k], numels[k])
              .copy_(params_[static_cast<size_t>(members[k])].reshape({-1}));
      }
      if (opts_.stage == 3) {
        MemoryScope scope(Category::kParameters);
        g->shard = flat.narrow(0, rank * l.shard, l.shard).clone();
        for (int64_t i : members) release_storage(params_[static_cast<size_t>(i)]);
        flat = at::Tensor();
      } else {
        g->full = flat;
        g->shard = flat.narrow(0, rank * l.shard, l.shard);
        for (size_t k = 0; k < members.size(); ++k)
          bind_storage(params_[static_cast<size_t>(members[k])], flat, l.offsets[k]);
      }
      {
        MemoryScope scope(Category::kGradients);
        if (opts_.stage == 1) {
          g->full_grad = at::zeros({l.padded}, first.options());
          g->shard_grad = g->full_grad.narrow(0, rank * l.shard, l.shard);
          for (size_t k = 0; k < members.size(); ++k) {
            at::Tensor& p = params_[static_cast<size_t>(members[k])];
            p.mutable_grad() = g->full_grad.narrow(0, l.offsets[k], numels[k]).view(p.sizes());
          }
        } else {
          g->shard_grad = at::zeros({l.shard}, first.options());
        }
      }
      g->piece_begin = pieces.size();
      for (const ShardSlice& s : shard_slices(l, rank)) {
        const at::Tensor& p = params_[static_cast<size_t>(members[static_cast<size_t>(s.param)])];
        const auto i = static_cast<size_t>(members[static_cast<size_t>(s.param)]);
        pieces.push_back({names_[i], s.param_offset, s.length, s.shard_offset, p.dim() >= 2,
                          info_[i].norm_weight, g->shard.narrow(0, s.shard_offset, s.length),
                          g->shard_grad.narrow(0, s.shard_offset, s.length)});
      }
      g->piece_end = pieces.size();
      units_[static_cast<size_t>(u)]->groups.push_back(static_cast<int64_t>(groups_.size()));
      units_[static_cast<size_t>(u)]->num_params += static_cast<int64_t>(members.size());
      groups_.push_back(std::move(g));
    }
    units_[static_cast<size_t>(u)]->gathered = opts_.stage < 3;
  }
  {
    MemoryScope scope(Category::kOptimizer);
    opt_ = std::make_unique<ShardedOptimizer>(std::move(pieces), opts_.adam, opts_.master_weights,
                                              opts_.offload);
  }
  if (opts_.stage == 3 && opts_.offload) {
    // The host copies are now the only copy of the parameter shards.
    opt_->drop_device_values();
    for (auto& g : groups_) g->shard = at::Tensor();
  }
  if (opts_.stage == 3) model_->add_block_hooks(this);
  ready_.assign(params_.size(), 0);
  reduce_by_all_reduce_ = comm_.backend() == "gloo";
}

ZeroDataParallel::~ZeroDataParallel() {
  if (opts_.stage == 3) model_->remove_block_hooks(this);
}

std::string ZeroDataParallel::describe() const {
  int64_t total = 0, padded = 0, mine = 0;
  for (auto& g : groups_) {
    for (int64_t n : g->layout.numels) total += n;
    padded += g->layout.padded;
    mine += g->layout.shard;
  }
  return c10::str("stage ", opts_.stage, " over ", comm_.size(), " rank(s): ", units_.size(),
                  " units (", units_.size() - 1, " blocks + root) in ", groups_.size(),
                  " flat groups, ", mine, " of ", total, " parameters in this rank's shard (",
                  padded - total, " padding), offload ", opts_.offload ? "on" : "off",
                  opts_.stage == 3 ? (opts_.prefetch ? ", prefetch on" : ", prefetch off") : "");
}

void ZeroDataParallel::wait_timed(CommWork& w) {
  const auto t0 = std::chrono::steady_clock::now();
  w.wait();
  stats_.wait_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ---- forward / backward -----------------------------------------------------

void ZeroDataParallel::before_forward() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  in_backward_ = false;
  if (opts_.broadcast_buffers) broadcast_buffers(comm_, *model_, 0);
  if (opts_.stage < 3) return;
  const auto root = static_cast<int64_t>(units_.size()) - 1;
  ensure_gathered(root);
  if (opts_.prefetch && root > 0) start_gather(0);
}

void ZeroDataParallel::after_forward(const at::Tensor& out) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (out.defined() && out.requires_grad()) {
    // The loss's gradient is the first thing backward computes.
    out.register_hook([this](const at::Tensor&) { on_backward_start(); });
    return;
  }
  // No backward follows (evaluation): nothing may stay gathered.
  if (opts_.stage == 3)
    for (size_t u = 0; u < units_.size(); ++u) release(static_cast<int64_t>(u));
}

void ZeroDataParallel::on_backward_start() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  in_backward_ = true;
  ready_.assign(params_.size(), 0);
  for (auto& u : units_) u->pending = u->num_params;
  next_launch_ = 0;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
  const auto last = static_cast<int64_t>(units_.size()) - 2;
  if (opts_.stage == 3 && opts_.prefetch && last >= 0) start_gather(last);
}

void ZeroDataParallel::pre_forward(int64_t block) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ensure_gathered(block);
  if (!in_backward_ && opts_.prefetch && block + 1 < static_cast<int64_t>(units_.size()) - 1)
    start_gather(block + 1);
}

at::Tensor ZeroDataParallel::post_forward(int64_t block, at::Tensor out) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (out.requires_grad())
    out.register_hook([this, block](const at::Tensor&) { pre_backward(block); });
  // A recomputation's re-run (inside backward) keeps the unit for the backward of
  // the segment that follows at once.
  if (!in_backward_) release(block);
  return out;
}

void ZeroDataParallel::pre_backward(int64_t unit) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ensure_gathered(unit);
  if (opts_.prefetch && unit > 0) start_gather(unit - 1);
}

void ZeroDataParallel::mark_ready(int64_t i) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!in_backward_ || !(sync_ || reduces_every_micro_step(opts_.stage))) return;
  const auto ui = static_cast<size_t>(i);
  STRATA_CHECK(!ready_[ui], "ZeRO: parameter ", names_[ui],
               " got its gradient twice in one backward (it is reached twice, e.g. by a "
               "reentrant backward); ZeRO supports one gradient per parameter per step");
  ready_[ui] = 1;
  --units_[static_cast<size_t>(unit_of_[ui])]->pending;
  launch_ready_units();
}

void ZeroDataParallel::launch_ready_units() {
  const auto n = static_cast<int64_t>(units_.size());
  auto unit_at = [n](int64_t k) { return k < n - 1 ? n - 2 - k : n - 1; };
  // Note [pipeline tied gradients under ZeRO]: a deferred root waits for finalize().
  const int64_t end = before_root_reduce_ ? n - 1 : n;
  while (next_launch_ < end && units_[static_cast<size_t>(unit_at(next_launch_))]->pending == 0) {
    launch_reduce(*units_[static_cast<size_t>(unit_at(next_launch_))]);
    if (opts_.stage == 3) release(unit_at(next_launch_));
    ++next_launch_;
  }
}

void ZeroDataParallel::launch_reduce(Unit& u) {
  at::NoGradGuard no_grad;
  MemoryScope scope(Category::kCommBuffers);
  const auto world = static_cast<double>(comm_.size());
  for (int64_t gi : u.groups) {
    Group& g = *groups_[static_cast<size_t>(gi)];
    const auto& l = g.layout;
    if (opts_.stage == 1) {
      g.reduce_in = g.full_grad;
    } else {
      // The unit's gradients leave autograd's tensors for one flat buffer, which
      // lives only until the reduction is done.
      g.reduce_in = at::zeros({l.padded}, g.shard_grad.options());
      for (size_t k = 0; k < g.params.size(); ++k) {
        at::Tensor& p = params_[static_cast<size_t>(g.params[k])];
        if (p.grad().defined())
          g.reduce_in.narrow(0, l.offsets[k], l.numels[k]).copy_(p.grad().reshape({-1}));
        p.mutable_grad() = at::Tensor();
      }
    }
    // Divided before the reduction, as DDP's default hook does.
    g.reduce_in.div_(world);
    if (reduce_by_all_reduce_) {
      g.reduce = comm_.all_reduce(g.reduce_in);  // Note [Gloo reductions]
    } else {
      g.reduce_out = at::empty({l.shard}, g.shard_grad.options());
      g.reduce = comm_.reduce_scatter(g.reduce_out, g.reduce_in);
    }
    STRATA_TIMELINE_MARK("zero.reduce.launch group ", gi);
    stats_.reduce_scatters += 1;
    stats_.bytes_reduced += static_cast<int64_t>(g.reduce_in.nbytes());
    reducing_.push_back(gi);
    while (reducing_.size() > kMaxReductionsInFlight) {
      complete_reduce(*groups_[static_cast<size_t>(reducing_.front())]);
      reducing_.pop_front();
    }
  }
}

void ZeroDataParallel::complete_reduce(Group& g) {
  at::NoGradGuard no_grad;
  wait_timed(g.reduce);
  const at::Tensor mine =
      g.reduce_out.defined() ? g.reduce_out
                             : g.reduce_in.narrow(0, comm_.rank() * g.layout.shard, g.layout.shard);
  if (opts_.stage == 1) {
    if (!mine.is_same(g.shard_grad)) g.shard_grad.copy_(mine);
  } else {
    g.shard_grad.add_(mine);  // accumulates over micro-steps
  }
  // Note [a reduction's buffer freed at its wait]: the backend's work holds the buffers
  // too, and Gloo's worker thread drops its reference a moment after the wait returns;
  // a step whose next allocation came first held the root unit's 3 MiB past its
  // reduction (the debug GPT's dp=2 ZeRO-2, one step in four runs). A finished CPU
  // reduction's flat buffer (stages 2-3; stage 1 reduces its gradients in place) is
  // freed here, whoever still holds the tensor. (On CUDA the wait orders streams only:
  // the buffer lives until NCCL's work lets it go.)
  if (!g.reduce_in.is_same(g.full_grad) && !g.reduce_in.is_cuda()) release_storage(g.reduce_in);
  g.reduce = CommWork();
  g.reduce_in = at::Tensor();
  g.reduce_out = at::Tensor();
  STRATA_TIMELINE_MARK("zero.reduce.done");
}

void ZeroDataParallel::complete_reductions() {
  for (int64_t gi : reducing_) complete_reduce(*groups_[static_cast<size_t>(gi)]);
  reducing_.clear();
}

void ZeroDataParallel::finish_backward() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (sync_ || reduces_every_micro_step(opts_.stage)) {
    // Parameters that got no gradient in this backward take part with what they
    // have (zero, or what earlier micro-steps accumulated at stage 1).
    for (auto& u : units_) u->pending = 0;
    launch_ready_units();
    complete_reductions();
    root_due_ = static_cast<bool>(before_root_reduce_);
  }
  // Prefetched units no backward used (a model whose first blocks got no gradient).
  if (opts_.stage == 3)
    for (size_t u = 0; u < units_.size(); ++u) release(static_cast<int64_t>(u));
  in_backward_ = false;
}

// ---- gathering (stage 3) ------------------------------------------------------

at::Tensor ZeroDataParallel::shard_source(Group& g) {
  if (g.shard.defined()) return g.shard;
  // Offload: the shard is assembled from the host copies, in the parameters' dtype.
  MemoryScope scope(Category::kCommBuffers);
  const at::Tensor& p = params_[static_cast<size_t>(g.params.front())];
  at::Tensor s = at::zeros({g.layout.shard}, p.options());
  for (size_t k = g.piece_begin; k < g.piece_end; ++k)
    s.narrow(0, opt_->piece(k).shard_offset, opt_->piece(k).length).copy_(opt_->master(k));
  return s;
}

void ZeroDataParallel::start_gather(int64_t unit) {
  Unit& u = *units_[static_cast<size_t>(unit)];
  if (u.gathered || u.gathering) return;
  at::NoGradGuard no_grad;
  for (int64_t gi : u.groups) {
    Group& g = *groups_[static_cast<size_t>(gi)];
    g.gather_src = shard_source(g);
    MemoryScope scope(Category::kCommBuffers);
    g.gather_buf = at::empty({g.layout.padded}, g.gather_src.options());
    g.gather = comm_.all_gather(g.gather_buf, g.gather_src);
    STRATA_TIMELINE_MARK("zero.all_gather.launch unit ", unit);
    stats_.gathers += 1;
    stats_.bytes_gathered += static_cast<int64_t>(g.gather_buf.nbytes());
  }
  u.gathering = true;
}

void ZeroDataParallel::ensure_gathered(int64_t unit) {
  Unit& u = *units_[static_cast<size_t>(unit)];
  if (u.gathered) return;
  start_gather(unit);
  for (int64_t gi : u.groups) {
    Group& g = *groups_[static_cast<size_t>(gi)];
    wait_timed(g.gather);
    g.gather = CommWork();
    for (size_t k = 0; k < g.params.size(); ++k)
      bind_storage(params_[static_cast<size_t>(g.params[k])], g.gather_buf, g.layout.offsets[k]);
    g.gather_buf = at::Tensor();  // the parameters hold it now
    g.gather_src = at::Tensor();
  }
  u.gathering = false;
  u.gathered = true;
  STRATA_TIMELINE_MARK("zero.all_gather.done unit ", unit);
}

void ZeroDataParallel::release(int64_t unit) {
  if (opts_.stage < 3) return;
  Unit& u = *units_[static_cast<size_t>(unit)];
  if (u.gathering) ensure_gathered(unit);
  if (!u.gathered) return;
  for (int64_t gi : u.groups)
    for (int64_t i : groups_[static_cast<size_t>(gi)]->params)
      release_storage(params_[static_cast<size_t>(i)]);
  u.gathered = false;
  STRATA_TIMELINE_MARK("zero.free unit ", unit);
}

// ---- optimizer ----------------------------------------------------------------

double ZeroDataParallel::grad_norm_squared() {
  at::Tensor t = at::full({1}, opt_->grad_norm_squared(), at::kDouble);
  if (comm_.size() > 1) comm_.all_reduce(t).wait();
  return t.item<double>();
}

void ZeroDataParallel::step(double lr, double grad_scale) {
  if (opts_.stage == 3) {
    opt_->step(lr, grad_scale);  // the next forward gathers the updated shards
    return;
  }
  // Group by group, so each group's all-gather runs while the next is stepped.
  // Windowed like the reductions (Note [reductions in flight]): Gloo gathers into a
  // temporary of the output's size before copying out.
  at::NoGradGuard no_grad;
  std::deque<std::pair<CommWork, at::Tensor>> in_flight;
  for (auto& g : groups_) {
    opt_->step(lr, grad_scale, g->piece_begin, g->piece_end);
    MemoryScope scope(Category::kCommBuffers);
    at::Tensor src = g->shard.clone();  // the shard is a region of the output buffer
    in_flight.emplace_back(comm_.all_gather(g->full, src), src);
    stats_.gathers += 1;
    stats_.bytes_gathered += static_cast<int64_t>(g->full.nbytes());
    if (in_flight.size() > kMaxReductionsInFlight) {
      wait_timed(in_flight.front().first);
      in_flight.pop_front();
    }
  }
  for (auto& w : in_flight) wait_timed(w.first);
}

void ZeroDataParallel::zero_grad() {
  at::NoGradGuard no_grad;
  for (auto& g : groups_) {
    if (g->full_grad.defined()) g->full_grad.zero_();
    g->shard_grad.zero_();
  }
  if (opts_.stage >= 2)
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
}

void ZeroDataParallel::inject_inf() {
  at::NoGradGuard no_grad;
  for (size_t k = 0; k < opt_->size(); ++k) {
    if (opt_->piece(k).length == 0) continue;
    opt_->piece(k).grad.narrow(0, 0, 1).fill_(INFINITY);
    return;
  }
}

ZeroStats ZeroDataParallel::take_stats() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ZeroStats s = stats_;
  stats_ = {};
  return s;
}

// ---- checkpoints ----------------------------------------------------------------

void ZeroDataParallel::finalize() {
  // Every reduction was waited for in backward's final callback ...
  std::lock_guard<std::recursive_mutex> lock(mu_);
  STRATA_ASSERT(reducing_.empty() && !in_backward_,
                "ZeRO finalize() while reductions are still in flight");
  if (!root_due_) return;
  // ... but a deferred root's (Note [pipeline tied gradients under ZeRO]).
  root_due_ = false;
  before_root_reduce_();
  launch_reduce(*units_.back());
  complete_reductions();
}

void ZeroDataParallel::defer_root_reduce(std::function<void()> before) {
  STRATA_CHECK(opts_.stage <= 2, "ZeRO-", opts_.stage,
               " cannot defer its root unit's reduction (it releases the unit in backward)");
  before_root_reduce_ = std::move(before);
}

nlohmann::json ZeroDataParallel::stats() {
  const ZeroStats z = take_stats();
  return {{"zero",
           {{"stage", opts_.stage},
            {"gathers", z.gathers},
            {"reduce_scatters", z.reduce_scatters},
            {"bytes_gathered", z.bytes_gathered},
            {"bytes_reduced", z.bytes_reduced},
            {"wait_ms", z.wait_ms}}}};
}

namespace {
// Where a flat range [offset, offset + length) of parameter p's local elements sits in
// its global tensor: one flat range when p is whole, else a flat range of each slice
// run's box it overlaps (Note [component state]). f(box offsets, box shape, offset
// in the box, offset in the range, length); empty box offsets: the global range.
template <typename F>
void for_each_region(const NamedParam& p, const at::Tensor& local, int64_t offset, int64_t length,
                     F&& f) {
  if (p.runs.empty()) {
    f(std::vector<int64_t>{}, std::vector<int64_t>{}, offset, 0, length);
    return;
  }
  const int64_t row = local.numel() / local.size(0);
  for (const SliceRun& r : p.runs) {
    const int64_t b0 = r.local_begin * row, b1 = (r.local_begin + r.length) * row;
    const int64_t lo = std::max(b0, offset), hi = std::min(b1, offset + length);
    if (lo >= hi) continue;
    std::vector<int64_t> box = local.sizes().vec();
    box[0] = r.length;
    f(r.offsets, box, lo - b0, lo - offset, hi - lo);
  }
}
}  // namespace

void ZeroDataParallel::save_optimizer_state(std::vector<TensorPiece>& out) {
  // Nothing is gathered: each piece is a view of what this rank holds (Note [ZeRO]).
  for (size_t k = 0; k < opt_->size(); ++k) {
    const ShardPiece& pc = opt_->piece(k);
    if (pc.length == 0) continue;
    const auto i =
        static_cast<size_t>(std::find(names_.begin(), names_.end(), pc.name) - names_.begin());
    const NamedParam& info = info_[i];
    if (!info.shard_saved) continue;
    const std::vector<int64_t> shape = info.full_shape();
    auto flat = [&](const std::string& name, const at::Tensor& t) {
      for_each_region(info, params_[i], pc.offset, pc.length,
                      [&](const std::vector<int64_t>& offsets, const std::vector<int64_t>& box,
                          int64_t in_box, int64_t at, int64_t n) {
                        out.push_back({name, t.narrow(0, at, n), shape, offsets, in_box, box});
                      });
    };
    flat("model." + pc.name, opt_->master(k));
    flat("optim." + pc.name + ".exp_avg", opt_->state(k).exp_avg);
    flat("optim." + pc.name + ".exp_avg_sq", opt_->state(k).exp_avg_sq);
    // The step once per tensor: by the piece at its global element 0.
    if (pc.offset == 0 && info.holds_first_element())
      out.push_back(
          {"optim." + pc.name + ".step", at::full({1}, opt_->state(k).step, at::kLong), {}, {}});
  }
}

void ZeroDataParallel::load_optimizer_state(const PieceReader& in) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const NamedParam& info = info_[i];
    in.expect_shape("model." + names_[i], info.full_shape());
    if (opts_.stage < 3) {
      // Every rank holds the full parameters below stage 3: one at a time.
      at::Tensor v = at::empty(params_[i].sizes(), at::kFloat);
      info.read_regions(in, "model." + names_[i], v);
      params_[i].copy_(v);
    }
  }
  for (size_t k = 0; k < opt_->size(); ++k) {
    const ShardPiece& pc = opt_->piece(k);
    if (pc.length == 0) continue;
    const auto i =
        static_cast<size_t>(std::find(names_.begin(), names_.end(), pc.name) - names_.begin());
    auto read = [&](const std::string& name, at::Tensor dst) {
      for_each_region(info_[i], params_[i], pc.offset, pc.length,
                      [&](const std::vector<int64_t>& offsets, const std::vector<int64_t>& box,
                          int64_t in_box, int64_t at, int64_t n) {
                        if (box.empty())
                          in.read_flat(name, dst.narrow(0, at, n), in_box);
                        else
                          in.read_box_flat(name, dst.narrow(0, at, n), offsets, box, in_box);
                      });
    };
    at::Tensor v = at::empty({pc.length}, at::kFloat);
    read("model." + pc.name, v);
    opt_->set_value(k, v);
    read("optim." + pc.name + ".exp_avg", opt_->state(k).exp_avg);
    read("optim." + pc.name + ".exp_avg_sq", opt_->state(k).exp_avg_sq);
    at::Tensor st = at::zeros({1}, at::kLong);
    in.read("optim." + pc.name + ".step", st);
    opt_->state(k).step = st.item<int64_t>();
  }
}

}  // namespace strata
