#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/distributed/mesh.h"
#include "strata/distributed/rendezvous.h"
#include "strata/memory/loss_scaler.h"
#include "strata/memory/timeline.h"
#include "strata/parallel/parallelize.h"
#include "strata/parallel/pipeline/schedule.h"
#include "strata/parallel/pipeline/simulate.h"
#include "strata/train/checkpointer.h"
#include "strata/train/data/sampler.h"
#include "strata/train/data/source.h"
#include "strata/train/faults.h"
#include "strata/train/metrics.h"
#include "strata/train/run_state.h"
#include "strata/train/timeline_hooks.h"

namespace strata {

struct TrainSummary {
  std::vector<double> losses;  // per step run in this process
  int64_t first_step = 0;      // the step the run started at (after a resume)
  std::optional<double> eval_loss;
  std::string metrics_path, checkpoint_dir;
  int stop_signal = 0;  // SIGTERM/SIGINT that stopped the run early (Note [graceful stop])
};

// The training loop for one rank: set-up in the order of DESIGN.md (layout, mesh,
// data, parallelize(), resume), then steps: the schedule over the micro-batches,
// grad_sync.finalize(), unscale and clip, optimizer.step(), metrics from each
// component's stats, periodic evaluation and checkpoints. It holds no strategy
// branch: data parallelism is a GradSync, the update an Optimizer (Note [GradSync]).
class Trainer {
 public:
  // Opens checkpoint.init_from when it is not a Strata checkpoint (a Hugging Face
  // folder: interop, a layer above, gives the reader); null: a Strata checkpoint.
  using WeightsOpener =
      std::function<std::unique_ptr<PieceReader>(const std::string& path, const ModelSpec& spec)>;
  // Note [user models]: what a program that links Strata brings besides the config: its
  // own model (a Family::kCustom spec whose builder makes each rank's part, run through
  // the same parallelize() as the flavours) and its own datasets instead of [data].
  struct Extensions {
    WeightsOpener open_weights;
    std::optional<ModelSpec> model;
    std::optional<DataSource> data;
  };
  Trainer(Config cfg, const WorldInfo& info, Extensions ext = {});
  ~Trainer();
  TrainSummary run();

  int64_t grad_accum() const { return accum_; }

 private:
  void print_startup();
  double train_step(int64_t step);
  double evaluate();
  void save(int64_t step);
  void resume(const std::string& spec);
  // Note [init_from]; src: the checkpoint already opened, or null for open_weights_.
  void init_from(const std::string& path, std::unique_ptr<PieceReader> src);
  std::chrono::milliseconds timeout() const;  // parallel.timeout_s
  // The stop signal any rank received (Note [graceful stop]), agreed over all ranks.
  int agreed_stop_signal();
  double average_over_dp(double v);
  // The step's highest tracked peak over all ranks, and whose (Note [every rank's peak]).
  struct RankPeak {
    int64_t bytes = 0, rank = 0;
  };
  RankPeak highest_peak(int64_t mine);
  double from_last_stage(double v);  // the last pipeline stage's value, on every rank
  std::vector<int64_t> stage_activation_shape() const;  // what one stage sends the next
  double forward_only(const Batch& batch);              // one micro-batch's loss (the last stage's)
  // Gradient clipping and loss scaling after backward: returns the factor the
  // optimizer applies to the gradients, or nothing when the step is skipped.
  std::optional<double> check_gradients(int64_t step);
  Batch to_device(Batch b) const;
  // Every component that takes part in checkpoints, in load order.
  std::vector<Stateful*> components();
  void write_timeline(int64_t step, const std::vector<TimelineSample>& samples);

  Config cfg_;
  WorldInfo info_;
  std::unique_ptr<Mesh> mesh_;
  DataSource data_;
  ModelSpec spec_;
  ParallelModel pm_;
  std::vector<StageActions> pipeline_;  // every pp rank's list (simulated each step)
  StageActions schedule_;               // this rank's actions in a step
  std::vector<std::vector<std::pair<int64_t, int64_t>>> sent_gradients_done_;  // per action
  std::unique_ptr<TimelineBlockHooks> timeline_hooks_;  // rank 0 with a memory timeline
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<SamplerState> sampler_state_;
  std::unique_ptr<RngState> rng_state_;
  std::unique_ptr<LossScaler> scaler_;
  double grad_norm_ = 0;
  bool skipped_ = false;                   // the last step was skipped (inf/NaN gradients)
  std::vector<int64_t> inject_inf_steps_;  // STRATA_INJECT_INF, for tests
  std::optional<Fault> fault_;             // STRATA_FAULT, for tests (Note [fault injection])
  std::unique_ptr<Checkpointer> checkpointer_;
  Extensions ext_;
  int64_t micro_ = 0, accum_ = 1, dp_rank_ = 0, start_step_ = 0, threads_ = 1;
  double peak_flops_ = 0;
  int64_t rss_base_ = 0;  // process RSS before the model was built
  // Last step: each compute action's start and end on this rank (Note [step timeline]).
  std::vector<TimedAction> step_timeline_;
  double schedule_ms_ = 0;            // last step: the executor's span on this rank
  std::array<double, 2> phase_ms_{};  // last step: forward+backward (with DDP sync), clip+optimizer
  nlohmann::json save_stats_;         // the last checkpoint's time and memory
  at::Device device_{at::kCPU};
  std::string ckpt_root_;
};

}  // namespace strata
