#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/memory/category.h"
#include "strata/memory/recompute.h"
#include "strata/models/flavours.h"
#include "strata/plan/activations.h"

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
  // A pipeline's ends (GPT and BERT): the first stage's share of outside_blocks (the
  // embeddings), the last stage's (final norm, head; BERT's pooler and MLM head) and
  // the tied embedding's copy the last stage holds besides (0 when untied).
  int64_t first_stage = 0, last_stage = 0, tied_copy = 0;
};
// Pure: the parameters of the model Strata builds from spec, or of one tp rank's
// part of it (its slices of the parallel linears and the vocabulary, and the tensors
// every tp rank holds whole); tests compare with the built models.
ParameterCount count_parameters(const ModelSpec& spec, int64_t tp = 1);

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

// Everything the estimate depends on: the resolved model and the run's memory
// and layout settings (estimate_input in plan/plan makes it).
struct EstimateInput {
  ModelSpec spec;
  std::string precision = "fp32";  // fp32, bf16, fp16
  bool master_weights = true;      // half parameters + fp32 masters (false: autocast)
  RecomputeMode recompute = RecomputeMode::kNone;
  int64_t recompute_k = 2;
  int64_t dp = 1, tp = 1, pp = 1;
  bool sequence_parallel = false;
  std::string schedule = "1f1b";      // pipeline: gpipe, 1f1b, interleaved, zb-h1
  int64_t pp_virtual = 1;             // chunks per rank (interleaved)
  std::vector<int64_t> stage_blocks;  // blocks per virtual stage; empty: ceil(L / pp) each
  int64_t stage = -1;                 // the pp rank to estimate; -1: the one whose peak is highest
  int64_t zero = 0;
  bool offload = false;
  bool zero_prefetch = true;
  int64_t micro_batch = 1, micro_batches = 1;  // per rank; accumulation steps
  std::string comm_hook = "none";
  bool nccl = false;           // CUDA: NCCL reduce-scatter, no Gloo staging buffers
  bool host_is_device = true;  // CPU training: the offloaded state is tracked memory too
  double data_bytes = 0;       // dataset tensors held in memory (other)
};

struct EstimatePoint {
  std::string phase;
  std::array<double, kNumCategories> bytes{};
  double total() const;
};

struct MemoryEstimate {
  ParameterCount count;       // the whole model's
  ParameterCount rank_count;  // one tp rank's (all of its pipeline stages)
  ModelStateBytes states;
  ActivationModel activation;
  std::vector<EstimatePoint> timeline;                 // one step, phase by phase
  EstimatePoint peak;                                  // the highest point of the timeline
  std::array<double, kNumCategories> category_peak{};  // each category's own maximum
  double activations_per_micro_batch = 0;  // kept at the end of one micro-batch's forward
  int64_t micro_batches_in_flight = 1;     // > 1 only under a pipeline schedule
  // zb-h1 (tp=1): micro-batches past their backward-input at the costliest moment,
  // each holding deferred_per_micro_batch bytes (Note [zb-h1 memory]).
  int64_t micro_batches_awaiting_weight = 0;
  double deferred_per_micro_batch = 0;
  int64_t stage = 0;               // the pp rank estimated
  double host_bytes = 0;           // offloaded state (on a GPU run: host memory)
  std::vector<std::string> notes;  // what the estimate assumed
};

// Pure: the per-rank memory of one training step.
MemoryEstimate estimate_memory(const EstimateInput& in);

// Korthikanti's per-layer figure next to the estimator's for the same layer (16-bit).
struct LayerActivationCheck {
  double korthikanti = 0, strata = 0;
  std::string explanation;
};
LayerActivationCheck compare_with_korthikanti(const ModelSpec& spec, int64_t micro_batch);

}  // namespace strata
