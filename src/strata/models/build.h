#pragma once
#include <memory>

#include "strata/models/flavours.h"
#include "strata/models/model.h"

namespace strata {

// Builds the part of the model for a resolved spec that a stage and tensor-parallel
// rank hold (Note [model parts]), on the CPU (the caller moves it). GPT and BERT can
// be cut; ResNet and the MLP are built whole.
std::shared_ptr<Model> build_model(const ModelSpec& spec, StageInfo stage = {}, TpContext tp = {});

}  // namespace strata
