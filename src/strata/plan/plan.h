#pragma once
#include <cstdint>

#include "strata/core/config.h"
#include "strata/distributed/parallel_dims.h"
#include "strata/models/flavours.h"
#include "strata/plan/estimator.h"

namespace strata {

// Note [one validation path]: `strata train` and `strata estimate` resolve a
// config through plan_run, so an invalid config (a bad value, an unknown
// flavour, a layout that does not fit the world or the model, a batch that does
// not split) gets the same one-line message from both.
struct RunPlan {
  ParallelDims dims{1, 1, 1, 1};
  ModelSpec spec;
  int64_t micro_batch = 1;  // per rank
  int64_t accum = 1;        // micro-steps per optimizer step
};
// custom: a program's own model (Note [user models]) instead of [model]'s flavour.
RunPlan plan_run(const Config& cfg, int64_t world_size, const DataShape& data,
                 const ModelSpec* custom = nullptr);

// The estimator's input for a planned run on `device` ("cuda": NCCL and host offload;
// empty: the config's training.device). The planner passes its profile's device, so a
// plan for GPUs made on this CPU estimates NCCL's buffers and host-side offload.
EstimateInput estimate_input(const Config& cfg, const RunPlan& plan,
                             const std::string& device = "");

// Bytes of dataset tensors a source keeps in memory for the whole run (Fashion-MNIST's
// 70,000 images and labels); 0 for streamed or generated data.
double resident_data_bytes(const Config& cfg);

}  // namespace strata
