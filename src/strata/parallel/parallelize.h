#pragma once
#include <memory>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/distributed/mesh.h"
#include "strata/memory/precision.h"
#include "strata/models/flavours.h"
#include "strata/models/model.h"
#include "strata/optim/optimizer.h"
#include "strata/parallel/grad_sync.h"

namespace strata {

// What parallelize() hands the trainer: the model parts this rank runs (one today; one
// per virtual stage with interleaved pipelines), one GradSync, one Optimizer, and the
// model's own checkpoint state (frozen parameters, buffers).
struct ParallelModel {
  std::vector<std::shared_ptr<Model>> parts;
  std::vector<NamedParam> params;  // trainable, over all parts
  std::vector<NamedParam> frozen;
  Precision precision = Precision::kFp32;
  at::ScalarType compute_dtype = at::kFloat;
  std::unique_ptr<GradSync> grad_sync;  // declared before the optimizer, which may use it
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Stateful> model_state;
  std::vector<int64_t> stage_blocks;  // a pipeline's blocks per virtual stage (empty: none)
  int64_t num_parameters() const;     // this rank's parts
};

// Note [parallelize order]: builds and wraps the model for this rank in a fixed order,
// each step a small function that logs one line (rank 0):
//   tensor parallel (the TpContext linears are cut for) -> recompute (the mode,
//   validated) -> pipeline stage (which blocks, embedding and head this rank holds; the
//   parts are built here, from the seed, and recompute applied over their blocks) ->
//   precision (half parameters with fp32 masters, or fp32 with half compute) -> data
//   parallel over dp (ZeRO-1/2/3, DDP, or local) -> optimizer.
// Every rank draws the whole model's initial weights from training.seed (Note [layer
// init]), so any layout starts from the weights of one process.
ParallelModel parallelize(const ModelSpec& spec, Mesh& mesh, const Config& cfg, at::Device device);

// What parallelize() refuses of a pipeline layout ([parallel] against dims), as the
// one-line error it raises; pure, so the planner enumerates only layouts that start.
void check_pipeline_layout(const ParallelConfig& p, const ParallelDims& dims);

}  // namespace strata
