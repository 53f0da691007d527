#pragma once
// Note [public API]: the header a program that links Strata includes (find_package(Strata),
// target Strata::strata). It trains the program's own model, a strata::Model whose
// blocks run in order and whose last part returns the loss, through the same
// parallelize() and Trainer as `strata train`: data parallel (DDP, ZeRO-1/2/3, offload),
// mixed precision, recompute, tensor parallel (linears from make_linear), pipeline
// stages (a builder that honours StageInfo), checkpoints that save, resume and reshard,
// metrics and the memory tracker, all set by the same [section] keys. Only this header
// and what it includes are installed; the rest of Strata stays private.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/core/errors.h"
#include "strata/distributed/mesh.h"
#include "strata/distributed/rendezvous.h"
#include "strata/models/linear.h"
#include "strata/models/model.h"
#include "strata/train/data/dataset.h"
#include "strata/train/data/images.h"
#include "strata/version.h"

namespace strata {

// The program's config as `strata train` reads its own: `defaults` (Strata's, changed as
// the program likes), then the TOML file of `-c FILE` / `--config FILE`, then every
// `--section.key=value` in order. Other arguments are left in `rest` (an error when
// rest is null). Bad input throws Error.
Config parse_config(int argc, char** argv, const Config& defaults = Config(),
                    std::vector<std::string>* rest = nullptr);

// This process's place among the ranks, from the environment `strata launch -- ./app`
// (or torchrun, mpirun, srun) gives it; one process when there is none.
WorldInfo init_from_env();

// The process groups of cfg's layout ([parallel] dp, tp, pp) over the world: train()
// builds its own; this is for a program's own collectives. Every rank calls it.
std::unique_ptr<Mesh> make_mesh(const WorldInfo& world, const Config& cfg);

// A program's own model.
struct UserModel {
  std::string name = "custom";  // in logs and the checkpoint's meta.json
  // Builds this rank's part: the blocks stage holds (all, unless pipeline parallel),
  // the first part embedding the batch and the last returning the loss; linears from
  // make_linear(..., tp, ...) for tensor parallel. Every rank seeds torch with
  // training.seed before calling it, so the parts start from one model's weights.
  ModelBuilder build;
  // Pipeline parallel: the model's blocks (stage_partition cuts them evenly, or by
  // parallel.pp_partition) and the shape of one sample's activations between blocks
  // (e.g. {seq_len, d_model}). Leave blocks 0 when the model is not cut into stages.
  int64_t blocks = 0;
  std::vector<int64_t> activation_shape;
};

// The program's datasets (eval may be null: no evaluation).
struct UserData {
  std::shared_ptr<Dataset> train, eval;
  std::string description = "the program's dataset";
};

struct TrainResult {
  std::vector<double> losses;  // each step this process ran, in order
  int64_t first_step = 0;      // the step it started at (after a resume)
  std::optional<double> eval_loss;
  std::string metrics_path, checkpoint_dir;
};

// Trains model on data for this rank under cfg; every rank of the world calls it.
TrainResult train(const Config& cfg, const WorldInfo& world, const UserModel& model,
                  const UserData& data);

// Runs body and turns a Strata error into "error: <one line>" on stderr and an exit
// status (2 bad input, 3 a lost rank or timed-out collective, 1 anything else), as the
// strata binary does. For main(): return strata::run_main([&] { ...; return 0; });
int run_main(const std::function<int()>& body);

}  // namespace strata
