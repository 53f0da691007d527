#pragma once
#include <cstdint>

#include "strata/models/flavours.h"

namespace strata {

// Note [estimator]: the estimator is a set of pure functions over the model spec and
// the run's settings that predict the bytes of each category the tracking allocator
// measures (memory/category.h). This part: parameter counts and the model states
// (parameters, gradients, optimizer), exact for Strata's layouts; activations,
// communication buffers and the peak build on it.

struct ParameterCount {
  int64_t total = 0;
  int64_t trainable = 0;       // total less frozen parameters (BERT's pooler)
  int64_t per_block = 0;       // the largest block's parameters (a ZeRO-3 unit)
  int64_t outside_blocks = 0;  // embeddings, norms, head: ZeRO's root unit
};
// Pure: the parameters of the model Strata builds from spec (tests compare with
// the built models).
ParameterCount count_parameters(const ModelSpec& spec);

// Per-rank bytes of the model states under a data-parallel layout.
struct ModelStateBytes {
  double parameters = 0, gradients = 0, optimizer = 0;  // on the device
  double host_optimizer = 0;  // offload: fp32 copies, gradient buffers and moments on the host
  double total() const { return parameters + gradients + optimizer; }
};
struct StateLayout {
  int64_t param_bytes = 4;      // 2 for bf16/fp16 parameters (master_weights), else 4
  bool master_weights = false;  // fp32 masters for half parameters (in the optimizer)
  int64_t zero = 0;             // 0..3
  int64_t dp = 1;
  bool offload = false;
};
// Pure: AdamW's states (two fp32 moments, plus fp32 masters for half parameters)
// partitioned as ZeRO does (Rajbhandari et al. 2020): stage 1 the optimizer, 2 also
// the gradients, 3 also the parameters. `trainable` parameters get gradients and
// optimizer state; the rest only parameter bytes.
ModelStateBytes model_state_bytes(int64_t total, int64_t trainable, const StateLayout& l);

// Korthikanti et al. 2022, eq. 2: activation bytes of one transformer layer in
// 16-bit training without recompute or parallelism, s*b*h*(34 + 5*a*s/h) (sequence
// s, micro-batch b, hidden h, heads a). A cross-check for the estimator's own
// per-layer figure, which follows Strata's kernels.
double korthikanti_layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a);

}  // namespace strata
