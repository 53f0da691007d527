#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/core/config.h"
#include "strata/distributed/comm.h"
#include "strata/models/model.h"
#include "strata/optim/optimizer.h"
#include "strata/parallel/grad_sync.h"
#include "strata/parallel/replicate.h"
#include "strata/parallel/zero/flat_layout.h"
#include "strata/parallel/zero/sharded_optimizer.h"

namespace strata {

struct ZeroOptions {
  int64_t stage = 1;  // 1, 2 or 3
  bool offload = false;
  bool prefetch = true;  // stage 3: gather the next unit while the current one computes
  bool broadcast_buffers = true;
  bool master_weights = true;  // fp32 masters for half parameters
  AdamWOptions adam;
  // Under tensor or pipeline parallelism, by parameter name: each slice's global shape
  // and runs (checkpoint pieces of the global tensors), its norm weight (1/tp for what
  // every tp rank holds whole, 0 for a pipeline stage's tied copy), and whether this
  // rank writes it (NamedParam::shard_saved). Empty: every parameter whole.
  std::unordered_map<std::string, NamedParam> tp_params;
};
ZeroOptions zero_options_from(const Config& cfg);

// Per-step communication figures (summed over the step).
struct ZeroStats {
  int64_t gathers = 0, reduce_scatters = 0;
  int64_t bytes_gathered = 0, bytes_reduced = 0;
  double wait_ms = 0;  // time spent waiting for gathers and reductions
};

// Note [ZeRO]
// Data parallelism with the model states partitioned over the dp ranks (Rajbhandari
// et al. 2020), for any Model (its blocks are the units):
//  - the trainable parameters of each block, and of everything outside the blocks
//    (the "root": embeddings, final norm, head), form a unit; each unit is one flat
//    buffer per dtype (Note [flat shards]) of which rank r owns shard r;
//  - stage 1: every rank holds the full parameters and gradients (gradients are
//    views into the flat buffers, so backward accumulates into them); after the last
//    micro-step each unit's gradients are reduce-scattered as soon as the unit is
//    done in backward (overlapped); each rank updates its shard with AdamW (the
//    optimizer state, and fp32 masters, only for the shard) and the updated shards
//    are all-gathered back into the full parameters;
//  - stage 2: as 1, but a unit's full gradients live only until its reduce-scatter
//    is launched: each rank keeps only its gradient shard. Every micro-step reduces
//    (gradients accumulate in the shards);
//  - stage 3: as 2, and the parameters are sharded too. A unit is all-gathered
//    before its forward and freed after it, gathered again before its backward
//    (a hook on its output's gradient) and freed once its gradients are reduced;
//    the next unit's gather is started while the current one computes (forward:
//    i+1, backward: i-1). The root stays gathered from the start of the forward to
//    the end of the backward. Under recompute, a segment's re-run gathers its units
//    again and keeps them for the backward that follows.
// Collectives are issued in the same order on every rank: gathers follow the
// forward/backward order, and reductions launch strictly in unit order (blocks
// L-1..0, then the root), each once its unit and all before it are done.
// Offload keeps the optimizer state and fp32 masters in host memory and steps there
// (ZeRO-Offload); at stage 3 the host masters are the only copy of the parameters
// between uses. Checkpoints are not gathered: each rank writes its pieces as flat
// ranges of the same global tensors ("model.<name>" fp32, "optim.<name>.*") that a run
// without ZeRO writes whole, so any layout reads them back (Note [component state]).
//
// Usage (as DistributedDataParallel):
//   ZeroDataParallel zero(model, mesh.comm(Axis::kDp), opts);
//   at::Tensor loss = zero.forward_loss([&] { return model->forward_loss(batch); });
//   loss.backward();  // this rank's gradient shard holds the dp average on return
//   zero.step(lr, factor);
class ZeroDataParallel : public BlockHooks, public GradSync {
 public:
  ZeroDataParallel(std::shared_ptr<Model> model, Comm& comm, ZeroOptions opts);
  ~ZeroDataParallel() override;
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  template <typename F>
  at::Tensor forward_loss(F&& f) {
    before_forward();
    at::Tensor out = f();
    after_forward(out);
    return out;
  }
  // Stage 1: whether this micro-step's backward reduces (false: gradients only
  // accumulate locally, as DDP's no_sync). Stages 2 and 3 reduce every micro-step.
  void set_sync(bool sync) override { sync_ = sync; }
  at::Tensor forward(const std::function<at::Tensor()>& f) override { return forward_loss(f); }
  void finalize() override;
  nlohmann::json stats() override;

  // Squared L2 norm of the averaged gradients over all shards (an all-reduce).
  double grad_norm_squared() override;
  // AdamW on this rank's shard with the gradients times grad_scale, then (stages 1
  // and 2) the updated shards are all-gathered into the full parameters.
  void step(double lr, double grad_scale);
  void zero_grad() override;
  // For tests (Note [injected overflow]): an inf in this rank's first gradient element.
  void inject_inf() override;

  // The optimizer's checkpoint pieces: this rank's shard of "model.<name>" (fp32) and
  // "optim.<name>.exp_avg|exp_avg_sq" as flat ranges, and "optim.<name>.step" from the
  // rank holding the parameter's first element. Loading reads this rank's ranges from
  // whatever layout wrote them (and, below stage 3, the full parameters).
  void save_optimizer_state(std::vector<TensorPiece>& out);
  void load_optimizer_state(const PieceReader& in);

  ZeroStats take_stats();
  std::string describe() const override;
  int64_t stage() const { return opts_.stage; }

  // Note [pipeline tied gradients under ZeRO]: a pipeline's first and last stage must
  // sum their tied embedding's gradients before the dp reduction of the unit holding
  // it (the root), and cannot do it inside backward: the last stage finishes its last
  // backward before the first stage's starts. So the root's reduction leaves backward
  // for finalize(), which runs `before` (the exchange) on the local gradients first;
  // the blocks still reduce inside backward, overlapped. Stage 2 keeps the root's
  // full gradients over the micro-steps until then (the other units still shard).
  void defer_root_reduce(std::function<void()> before);

  // BlockHooks (stage 3)
  void pre_forward(int64_t block) override;
  at::Tensor post_forward(int64_t block, at::Tensor out) override;

 private:
  struct Group;
  struct Unit;
  void before_forward();
  void after_forward(const at::Tensor& out);
  void on_backward_start();
  void pre_backward(int64_t unit);
  void mark_ready(int64_t param);
  void launch_ready_units();
  void launch_reduce(Unit& u);
  void complete_reduce(Group& g);
  void complete_reductions();  // every reduction in flight, oldest first
  void finish_backward();
  void start_gather(int64_t unit);
  void ensure_gathered(int64_t unit);
  void release(int64_t unit);
  at::Tensor shard_source(Group& g);
  void wait_timed(CommWork& w);

  std::shared_ptr<Model> model_;
  Comm& comm_;
  ZeroOptions opts_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::vector<NamedParam> info_;  // per parameter: tp geometry, norm weight, writer
  std::vector<int64_t> unit_of_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<std::unique_ptr<Unit>> units_;  // blocks 0..L-1, then the root
  std::unique_ptr<GradReadyHooks> ready_hooks_;
  std::unique_ptr<ShardedOptimizer> opt_;

  std::recursive_mutex mu_;
  std::function<void()> before_root_reduce_;  // set: the root reduces in finalize()
  bool root_due_ = false;                     // a deferred root reduction is owed
  bool sync_ = true;
  bool in_backward_ = false;
  bool reduce_by_all_reduce_ = false;  // Note [Gloo reductions]
  std::vector<char> ready_;
  int64_t next_launch_ = 0;       // index into the launch order (units L-1..0, root)
  std::deque<int64_t> reducing_;  // groups whose reduce-scatter is in flight, oldest first
  ZeroStats stats_;
};

// The Optimizer a ZeRO run holds: AdamW over this rank's shards, stepped and
// checkpointed through the ZeroDataParallel that owns them.
class ZeroOptimizer : public Optimizer {
 public:
  explicit ZeroOptimizer(ZeroDataParallel& zero) : zero_(zero) {}
  void step(double lr, double grad_scale) override { zero_.step(lr, grad_scale); }
  std::string describe() const override { return "AdamW over this rank's ZeRO shards"; }
  void save_state(std::vector<TensorPiece>& out) override { zero_.save_optimizer_state(out); }
  void load_state(const PieceReader& in) override { zero_.load_optimizer_state(in); }

 private:
  ZeroDataParallel& zero_;
};

}  // namespace strata
