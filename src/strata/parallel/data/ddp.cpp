#include "strata/parallel/data/ddp.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/core/logging.h"
#include "strata/memory/timeline.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/parallel/data/bucket.h"
#include "strata/parallel/data/powersgd.h"
#include "strata/parallel/replicate.h"

namespace strata {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

DdpOptions ddp_options_from(const ParallelConfig& p) {
  DdpOptions o;
  o.bucket_cap_mb = p.bucket_cap_mb;
  o.first_bucket_mb = p.first_bucket_mb;
  o.find_unused_parameters = p.find_unused_parameters;
  o.broadcast_buffers = p.broadcast_buffers;
  o.hook = make_comm_hook(p);
  return o;
}

std::shared_ptr<CommHook> make_comm_hook(const ParallelConfig& p) {
  if (p.comm_hook == "fp16") return std::make_shared<CastHook>(at::kHalf);
  if (p.comm_hook == "bf16") return std::make_shared<CastHook>(at::kBFloat16);
  if (p.comm_hook == "powersgd") {
    PowerSgdOptions o;
    o.rank = p.powersgd_rank;
    o.start_iter = p.powersgd_start_iter;
    o.min_compression = p.powersgd_min_compression;
    o.error_feedback = p.powersgd_error_feedback;
    o.warm_start = p.powersgd_warm_start;
    o.orth_eps = p.powersgd_orth_eps;
    o.seed = p.powersgd_seed;
    return std::make_shared<PowerSgdHook>(o);
  }
  STRATA_CHECK(p.comm_hook == "none", "parallel.comm_hook='", p.comm_hook,
               "' is not known (choose from none, fp16, bf16, powersgd)");
  return std::make_shared<AllReduceHook>();
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 Comm& comm, DdpOptions opts)
    : module_(std::move(module)),
      comm_(comm),
      opts_(std::move(opts)),
      hook_(opts_.hook ? opts_.hook : std::make_shared<AllReduceHook>()),
      hook_comm_(comm) {
  STRATA_CHECK(opts_.bucket_cap_mb > 0, "parallel.bucket_cap_mb=", opts_.bucket_cap_mb,
               " must be positive (25 is PyTorch's default)");
  STRATA_CHECK(opts_.first_bucket_mb > 0, "parallel.first_bucket_mb=", opts_.first_bucket_mb,
               " must be positive");
  for (auto& item : module_->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  STRATA_CHECK(!params_.empty(), "DDP: the model has no parameter that requires a gradient");
  verify_same_parameters(comm_, names_, params_, "DDP");
  broadcast_coalesced(comm_, params_, 0);
  if (opts_.broadcast_buffers) before_forward();

  // Note [bucket order] in bucket.h: before the first step, the reverse of
  // registration order approximates the order gradients become ready.
  std::vector<int64_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(params_.size() - 1 - i);
  set_bucket_order(order);

  ready_hooks_ =
      std::make_unique<GradReadyHooks>(params_, names_, [this](int64_t i) { mark_ready(i); });
  for (size_t i = 0; i < params_.size(); ++i)
    param_of_node_[ready_hooks_->node(i)] = static_cast<int64_t>(i);
  reset_step();
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::vector<std::vector<int64_t>> DistributedDataParallel::plan_buckets(
    const std::vector<int64_t>& order) const {
  std::vector<int64_t> bytes;
  std::vector<int> keys;
  for (auto& p : params_) {
    bytes.push_back(static_cast<int64_t>(p.nbytes()));
    keys.push_back(static_cast<int>(p.scalar_type()));
  }
  return assign_buckets(order, bytes, keys, static_cast<int64_t>(opts_.first_bucket_mb * kMiB),
                        static_cast<int64_t>(opts_.bucket_cap_mb * kMiB));
}

void DistributedDataParallel::build_buckets(const std::vector<std::vector<int64_t>>& plan) {
  std::vector<GradBucket> buckets;
  bucket_of_.assign(params_.size(), -1);
  slot_of_.assign(params_.size(), -1);
  at::NoGradGuard no_grad;
  MemoryScope scope(Category::kGradients);
  for (size_t b = 0; b < plan.size(); ++b) {
    GradBucket bucket;
    bucket.index = static_cast<int64_t>(b);
    int64_t total = 0;
    for (int64_t i : plan[b]) {
      bucket.offsets.push_back(total);
      total += params_[static_cast<size_t>(i)].numel();
    }
    const at::Tensor& first = params_[static_cast<size_t>(plan[b].front())];
    bucket.buffer = at::zeros({total}, first.options());
    for (size_t k = 0; k < plan[b].size(); ++k) {
      at::Tensor& p = params_[static_cast<size_t>(plan[b][k])];
      at::Tensor view = bucket.buffer.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes());
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
      bucket.grads.push_back(view);
      bucket.params.push_back(plan[b][k]);
      bucket_of_[static_cast<size_t>(plan[b][k])] = static_cast<int64_t>(b);
      slot_of_[static_cast<size_t>(plan[b][k])] = static_cast<int64_t>(k);
    }
    buckets.push_back(std::move(bucket));
  }
  buckets_ = std::move(buckets);
}

void DistributedDataParallel::reset_step() {
  in_step_ = false;
  ready_.assign(params_.size(), 0);
  pending_.clear();
  for (auto& b : buckets_) pending_.push_back(static_cast<int64_t>(b.params.size()));
  next_launch_ = 0;
}

void DistributedDataParallel::before_forward() {
  if (opts_.broadcast_buffers) broadcast_buffers(comm_, *module_, 0);
}

void DistributedDataParallel::before_backward(const at::Tensor& output) {
  if (!opts_.find_unused_parameters || !sync_ || !output.defined() || !output.requires_grad())
    return;
  // Walk the graph from the output: accumulators it does not reach belong to
  // parameters that will get no gradient in this backward.
  std::vector<char> reached(params_.size(), 0);
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  if (auto fn = output.grad_fn()) stack.push_back(fn.get());
  while (!stack.empty()) {
    torch::autograd::Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (auto it = param_of_node_.find(n); it != param_of_node_.end())
      reached[static_cast<size_t>(it->second)] = 1;
    for (const auto& e : n->next_edges())
      if (e.function) stack.push_back(e.function.get());
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (reached[i] || ready_[i]) continue;
    adopt_grad(i);
    ready_[i] = 1;
    --pending_[static_cast<size_t>(bucket_of_[i])];
  }
  launch_ready_buckets();
}

void DistributedDataParallel::mark_ready(int64_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto ui = static_cast<size_t>(i);
  // Note [accumulating into the buckets]: after zero_grad a micro-batch's fresh
  // gradient is a tensor of its own; an unsynchronised micro-batch (accumulation) moves
  // it into its bucket view at once, so the next ones add into the bucket in place.
  // Left where it was, every gradient was held twice (its own tensor and the bucket)
  // through the rest of the step: dp=2 with 4 micro-batches peaked a whole gradient
  // copy above the estimate from the third step on.
  if (!sync_) {
    adopt_grad(ui);
    return;
  }
  if (!in_step_) {
    in_step_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
  }
  STRATA_CHECK(!ready_[ui], "DDP: parameter ", names_[ui],
               " got its gradient twice in one backward (it is reached twice, e.g. by a "
               "reentrant backward); DDP supports one gradient per parameter per step");
  adopt_grad(ui);
  ready_[ui] = 1;
  if (!rebuilt_) ready_order_.push_back(i);
  --pending_[static_cast<size_t>(bucket_of_[ui])];
  launch_ready_buckets();
}

void DistributedDataParallel::adopt_grad(size_t i) {
  // After zero_grad (or a user's own code) .grad may be undefined or a tensor of its
  // own: autograd then stored the new gradient as it was computed (no read-add-write
  // into a zeroed buffer), and it is moved into the bucket here.
  GradBucket& b = buckets_[static_cast<size_t>(bucket_of_[i])];
  at::Tensor& view = b.grads[static_cast<size_t>(slot_of_[i])];
  const at::Tensor& g = params_[i].grad();
  if (g.is_same(view)) return;
  at::NoGradGuard no_grad;
  if (g.defined())
    view.copy_(g);
  else
    view.zero_();
  params_[i].mutable_grad() = view;
}

void DistributedDataParallel::zero_grad() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
  // Note [bucket rebuild]: the rebuild waits for the first zero_grad after the first
  // synchronized backward. There no gradient is live, so the old buckets are freed
  // before the new ones are allocated; rebuilt at the end of backward, both sets (two
  // copies of every gradient) coexisted through the first optimizer step.
  if (rebuild_pending_) {
    rebuild_pending_ = false;
    rebuild_from_ready_order();
    reset_step();
  }
}

void DistributedDataParallel::launch_ready_buckets() {
  // Strictly in bucket order, so every rank issues the same collectives in the same
  // order even when gradients become ready in different orders on different ranks.
  while (next_launch_ < num_buckets() && pending_[static_cast<size_t>(next_launch_)] == 0) {
    hook_->launch(buckets_[static_cast<size_t>(next_launch_)], hook_comm_);
    STRATA_TIMELINE_MARK("ddp.reduce.launch bucket ", next_launch_);
    ++next_launch_;
  }
}

void DistributedDataParallel::finish_backward() {
  std::lock_guard<std::mutex> lock(mu_);
  backward_end_ = std::chrono::steady_clock::now();
  std::vector<std::string> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (!opts_.find_unused_parameters) {
      missing.push_back(names_[i]);
      continue;
    }
    adopt_grad(i);
    ready_[i] = 1;  // its gradient (zero, or what earlier micro-steps accumulated) joins in
    --pending_[static_cast<size_t>(bucket_of_[i])];
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t k = 0; k < std::min<size_t>(missing.size(), 3); ++k)
      list += (k ? ", " : "") + missing[k];
    if (missing.size() > 3) list += c10::str(" and ", missing.size() - 3, " more");
    reset_step();
    STRATA_FAIL("DDP: ", missing.size(), " parameter(s) received no gradient in this step (", list,
                "); set parallel.find_unused_parameters=true, or make every parameter "
                "take part in the loss");
  }
  launch_ready_buckets();
  STRATA_ASSERT(next_launch_ == num_buckets(), "DDP: ", next_launch_, " of ", num_buckets(),
                " buckets launched at the end of backward");
  hook_->finish(buckets_, hook_comm_);
  STRATA_TIMELINE_MARK("ddp.reduce.done");

  // Overlap: the union of the collectives' running intervals, and the part of it
  // before backward's computation ended.
  auto& iv = hook_comm_.intervals;
  std::sort(iv.begin(), iv.end());
  std::chrono::steady_clock::time_point cur_s{}, cur_e{};
  bool open = false;
  auto flush = [&] {
    if (!open) return;
    stats_.comm_ms += std::chrono::duration<double, std::milli>(cur_e - cur_s).count();
    auto hidden_end = std::min(cur_e, backward_end_);
    if (hidden_end > cur_s)
      stats_.hidden_ms += std::chrono::duration<double, std::milli>(hidden_end - cur_s).count();
  };
  for (auto& [s, e] : iv) {
    if (open && s <= cur_e) {
      cur_e = std::max(cur_e, e);
      continue;
    }
    flush();
    cur_s = s;
    cur_e = e;
    open = true;
  }
  flush();
  iv.clear();
  for (auto& b : buckets_) stats_.bytes_uncompressed += static_cast<int64_t>(b.buffer.nbytes());
  stats_.syncs += 1;
  if (!rebuilt_) {
    rebuilt_ = true;
    rebuild_pending_ = opts_.rebuild_buckets;
  }
  reset_step();
}

void DistributedDataParallel::rebuild_from_ready_order() {
  // Rank 0's observed order is used everywhere: buckets must match across ranks.
  std::vector<char> seen(params_.size(), 0);
  std::vector<int64_t> order;
  for (int64_t i : ready_order_)
    if (!seen[static_cast<size_t>(i)]) {
      seen[static_cast<size_t>(i)] = 1;
      order.push_back(i);
    }
  for (size_t k = params_.size(); k-- > 0;)
    if (!seen[k]) order.push_back(static_cast<int64_t>(k));
  ready_order_.clear();
  at::Tensor t = at::tensor(order, at::kLong);
  comm_.broadcast(t, 0).wait();
  order.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  if (set_bucket_order(order))
    log_rank0("DDP: buckets rebuilt in the order gradients became ready (", buckets_.size(),
              " buckets)");
}

bool DistributedDataParallel::set_bucket_order(const std::vector<int64_t>& order) {
  bucket_order_ = order;
  auto plan = plan_buckets(order);
  std::vector<std::vector<int64_t>> current;
  for (auto& b : buckets_) current.push_back(b.params);
  if (plan == current) return false;
  buckets_.clear();  // every .grad is undefined here: nothing to carry over
  build_buckets(plan);
  return true;
}

// Note [bucket order in checkpoints]: a bucket's elements are summed in an order set by
// where they fall in the ring's chunks, so the bucket layout decides the last bits of
// every averaged gradient (at dp >= 3). A run resumed with the first step's layout would
// drift by an ulp from the run it continues; the learned order is saved instead and a
// resume starts with the buckets the run had. Named by a hash of the parameter names:
// another model part or model finds nothing and plans as a fresh run does.
std::string DistributedDataParallel::state_name() const {
  return "ddp.bucket_order." + content_hash(c10::Join(",", names_));
}

void DistributedDataParallel::save_state(std::vector<TensorPiece>& out) {
  if (!opts_.writes_state || !rebuilt_) return;
  TensorPiece p;
  p.name = state_name();
  p.tensor = at::tensor(bucket_order_, at::kLong);
  out.push_back(std::move(p));
}

void DistributedDataParallel::load_state(const PieceReader& in) {
  const std::string name = state_name();
  const auto n = static_cast<int64_t>(params_.size());
  if (!opts_.rebuild_buckets || !in.has(name) || in.global_shape(name) != std::vector<int64_t>{n})
    return;
  at::Tensor t = at::empty({n}, at::kLong);
  in.read(name, t);
  std::vector<int64_t> order(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
  std::vector<char> seen(params_.size(), 0);
  for (int64_t i : order)
    if (i < 0 || i >= n || seen[static_cast<size_t>(i)]++) return;  // not a permutation
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
  set_bucket_order(order);
  rebuilt_ = true;
  rebuild_pending_ = false;
  ready_order_.clear();
  reset_step();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& d, bool active)
    : d_(d), prev_(d.sync_) {
  if (active) d_.sync_ = false;
}
DistributedDataParallel::NoSync::~NoSync() {
  d_.sync_ = prev_;
}

DdpStats DistributedDataParallel::take_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  DdpStats out = stats_;
  out.bytes_sent = hook_comm_.bytes_sent;
  hook_comm_.bytes_sent = 0;
  stats_ = {};
  return out;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (auto& b : buckets_) {
    out.emplace_back();
    for (int64_t i : b.params) out.back().push_back(names_[static_cast<size_t>(i)]);
  }
  return out;
}

std::string DistributedDataParallel::describe() const {
  return c10::str("DDP over dp=", comm_.size(), ": ", buckets_.size(), " gradient buckets (cap ",
                  opts_.bucket_cap_mb, " MiB, first ", opts_.first_bucket_mb, " MiB), comm hook ",
                  hook_->name(), opts_.find_unused_parameters ? ", finds unused parameters" : "");
}

void DistributedDataParallel::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  sync_ = sync;
}

void DistributedDataParallel::finalize() {
  // The synchronized backward's final callback waited for every bucket.
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_ASSERT(!in_step_, "DDP finalize() while a synchronized backward is unfinished");
}

double DistributedDataParallel::grad_norm_squared() {
  // Gradients are the dp average on every rank: the local norm is the global one.
  std::vector<NamedParam> ps;
  for (size_t i = 0; i < params_.size(); ++i) ps.push_back({names_[i], params_[i]});
  return strata::grad_norm_squared(ps);
}

nlohmann::json DistributedDataParallel::stats() {
  const DdpStats d = take_stats();
  return {{"ddp",
           {{"bytes_sent", d.bytes_sent},
            {"bytes_uncompressed", d.bytes_uncompressed},
            {"comm_ms", d.comm_ms},
            {"hidden_fraction", d.hidden_fraction()}}}};
}

void DistributedDataParallel::inject_inf() {
  if (params_.empty()) return;
  at::NoGradGuard no_grad;
  params_[0].mutable_grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
}

}  // namespace strata
