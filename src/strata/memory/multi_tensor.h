#pragma once
#include <cstdint>

namespace strata {

// Note [multi-tensor AdamW]: elements per multi-tensor chunk of AdamW on CUDA (and of
// the gradient norm's fp64 chunks there). A chunk's temporaries (the denominators,
// widened half gradients) are at most a few of these in fp32, 64 MiB each, however
// large the model; a single tensor larger than this is a chunk of its own. Here, below
// the optimizer, because the estimator predicts those temporaries.
constexpr int64_t kForeachChunkElements = int64_t{1} << 24;

}  // namespace strata
