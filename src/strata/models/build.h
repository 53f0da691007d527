#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "strata/core/state.h"
#include "strata/models/flavours.h"
#include "strata/models/model.h"

namespace strata {

// Builds the part of the model for a resolved spec that a stage and tensor-parallel
// rank hold (Note [model parts]), on the CPU (the caller moves it). GPT and BERT can
// be cut; ResNet and the MLP are built whole.
std::shared_ptr<Model> build_model(const ModelSpec& spec, StageInfo stage = {}, TpContext tp = {});

// The whole model of a spec with every parameter read from "model.<name>" (a checkpoint
// of any layout, or an imported model), for one process: generation, tests.
std::shared_ptr<Model> build_model_from(const ModelSpec& spec, const PieceReader& in);

// Where a tensor-parallel slice sits in its global tensor: runs of the local tensor's
// rows (dim 0) and the box each is in the global tensor. One run for a plain split;
// three for attention's grouped [q; k; v].
struct TpGeometry {
  std::vector<int64_t> global_shape;
  std::vector<SliceRun> runs;
};
// The parameters of a part that hold a tensor-parallel slice (by TensorImpl); every
// other parameter is whole on each tp rank (replicated). Empty at tp = 1.
std::unordered_map<const void*, TpGeometry> tp_geometry(Model& part);

}  // namespace strata
