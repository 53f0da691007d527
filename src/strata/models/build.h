#pragma once
#include <memory>

#include "strata/models/flavours.h"
#include "strata/models/model.h"

namespace strata {

// Builds the model for a resolved spec on the CPU (the trainer moves it).
std::shared_ptr<Model> build_model(const ModelSpec& spec);

}  // namespace strata
