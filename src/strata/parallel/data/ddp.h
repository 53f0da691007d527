#pragma once
#include <torch/nn/module.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/core/config.h"
#include "strata/distributed/comm.h"
#include "strata/parallel/data/comm_hook.h"
#include "strata/parallel/grad_sync.h"
#include "strata/parallel/replicate.h"

namespace torch::autograd {
struct Node;
}

namespace strata {

struct DdpOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  // After the first synchronized step, re-bucket by the order gradients actually
  // became ready (rank 0's order, broadcast), as PyTorch does.
  bool rebuild_buckets = true;
  std::shared_ptr<CommHook> hook;  // null: plain average (AllReduceHook)
  // This rank saves the bucket order (Note [bucket order in checkpoints]): one rank per
  // set of parameters (dp rank 0 of tp rank 0 of each stage).
  bool writes_state = false;
};
DdpOptions ddp_options_from(const ParallelConfig& p);
std::shared_ptr<CommHook> make_comm_hook(const ParallelConfig& p);

// Per-step communication figures of the reducer (summed over the step's syncs).
struct DdpStats {
  int64_t bytes_sent = 0;          // what the comm hook put on the wire
  int64_t bytes_uncompressed = 0;  // what a plain all-reduce of the buckets would send
  double comm_ms = 0;              // wall time some gradient collective was running
  double hidden_ms = 0;            // ... of which before backward's computation ended
  int64_t syncs = 0;
  double hidden_fraction() const { return comm_ms > 0 ? hidden_ms / comm_ms : 1.0; }
};

// Note [DDP]: data parallelism for any torch::nn::Module, with PyTorch DDP's
// semantics and its reducer's design:
//  - at wrap time rank 0's parameters and buffers are broadcast, after a check that
//    every rank has the same parameter names, shapes and dtypes;
//  - gradients are views into flat bucket buffers (gradient_as_bucket_view), so
//    backward accumulates straight into what is communicated;
//  - a post-hook on each parameter's gradient accumulator marks it ready; when all of
//    a bucket's gradients are ready, and all earlier buckets have been launched, its
//    reduction starts (through the comm hook) while backward continues;
//  - an autograd final callback waits for the reductions before backward() returns,
//    so after loss.backward() the gradients are the dp average, as in PyTorch;
//  - inside a NoSync scope nothing is communicated: gradients accumulate locally
//    and the first backward outside the scope reduces the sum.
//
// Usage:
//   DistributedDataParallel ddp(model, mesh.comm(Axis::kDp), ddp_options_from(cfg));
//   at::Tensor loss = ddp.forward_loss([&] { return model->forward_loss(batch); });
//   loss.backward();  // gradients averaged over the dp group on return
class DistributedDataParallel : public GradSync {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, Comm& comm, DdpOptions opts);
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Before a forward: rank 0's buffers are broadcast (broadcast_buffers).
  void before_forward();
  // After a forward whose output will be back-propagated: with
  // find_unused_parameters, parameters the graph does not reach are marked ready
  // now, so their buckets need not wait for the end of backward.
  void before_backward(const at::Tensor& output);
  // before_forward, f(), before_backward(result).
  template <typename F>
  at::Tensor forward_loss(F&& f) {
    before_forward();
    at::Tensor out = f();
    before_backward(out);
    return out;
  }

  // GradSync (Note [GradSync]): set_sync(false) is a NoSync scope left open.
  std::string describe() const override;
  at::Tensor forward(const std::function<at::Tensor()>& f) override { return forward_loss(f); }
  void set_sync(bool sync) override;
  void finalize() override;
  double grad_norm_squared() override;
  nlohmann::json stats() override;
  void inject_inf() override;
  void save_state(std::vector<TensorPiece>& out) override;
  void load_state(const PieceReader& in) override;

  // While a NoSync is alive, backward accumulates gradients without communicating.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d, bool active = true);
    ~NoSync();

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };

  // Note [DDP zero_grad]: clears .grad (set to none, as PyTorch's default) while the
  // buckets keep their memory: the next backward then stores each fresh gradient
  // and the ready hook copies it into the bucket (one read and one write), instead
  // of zeroing the bucket and adding into it (one write, then two reads and a write).
  // After a synchronized backward every .grad is its bucket view again.
  void zero_grad() override;

  DdpStats take_stats();
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Parameter names per bucket, in launch order (for logs and tests).
  std::vector<std::vector<std::string>> bucket_names() const;
  const CommHook& hook() const { return *hook_; }

 private:
  std::vector<std::vector<int64_t>> plan_buckets(const std::vector<int64_t>& order) const;
  void build_buckets(const std::vector<std::vector<int64_t>>& plan);
  void mark_ready(int64_t param);
  void launch_ready_buckets();
  void adopt_grad(size_t i);  // makes .grad of parameter i its bucket view (copying)
  void finish_backward();
  void rebuild_from_ready_order();
  void reset_step();

  std::shared_ptr<torch::nn::Module> module_;
  Comm& comm_;
  DdpOptions opts_;
  std::shared_ptr<CommHook> hook_;
  HookComm hook_comm_;

  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::unique_ptr<GradReadyHooks> ready_hooks_;
  std::unordered_map<const torch::autograd::Node*, int64_t> param_of_node_;  // accumulator -> param

  std::vector<GradBucket> buckets_;
  std::vector<int64_t> bucket_of_, slot_of_;  // per parameter: bucket and position in it

  // Per-step state (guarded by mu_: on CUDA, hooks run on the device's autograd thread).
  std::mutex mu_;
  bool sync_ = true;
  bool in_step_ = false;          // a synchronized backward is in progress
  std::vector<char> ready_;       // per parameter
  std::vector<int64_t> pending_;  // per bucket: gradients not yet ready
  int64_t next_launch_ = 0;
  std::vector<int64_t> ready_order_;
  std::vector<int64_t> bucket_order_;  // what the buckets were last planned from
  std::string state_name() const;
  // Plans the buckets from a parameter order and builds them unless they are already
  // so (no gradient may be live); true when they changed.
  bool set_bucket_order(const std::vector<int64_t>& order);
  bool rebuilt_ = false;
  bool rebuild_pending_ = false;  // Note [bucket rebuild]
  std::chrono::steady_clock::time_point backward_end_;
  DdpStats stats_;
};

}  // namespace strata
