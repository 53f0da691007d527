#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace strata {

// Each struct mirrors one TOML section; see README "Config reference" for every key.
struct ModelConfig {
  std::string flavour =
      "debug";  // debug, gpt2-124m, gpt2-350m, gpt2-1.5b, bert-base, resnet-18, resnet-50, mlp
  int64_t vocab_size = 0;  // 0: from the tokenizer (text) or the flavour
  // The embedding and head are padded to a multiple of this (and of tp) so the
  // vocabulary splits over the tp ranks and GEMMs get round shapes (Megatron's
  // make-vocab-size-divisible-by); padded logits are masked out of the loss.
  int64_t vocab_multiple = 128;
  int64_t seq_len = 0;  // 0: the flavour's context length
  int64_t n_layer = 0;  // 0: the flavour's value
  int64_t n_head = 0;
  int64_t d_model = 0;
  double dropout = 0.0;
  bool tied_embedding = true;
  int64_t num_classes = 0;  // image models; 0: from the data source
  int64_t hidden = 0;       // mlp hidden width; 0: flavour value
};

struct DataConfig {
  std::string source = "kjv";  // kjv, text, tokens, fashion-mnist, synthetic
  std::string path;       // text: a UTF-8 file; tokens: a file or glob; fashion-mnist: IDX folder
  std::string eval_path;  // tokens: held-out file or glob ("": the train tail)
  std::string token_format = "auto";  // tokens: auto, llmc, raw (Note [token files])
  int64_t tokenizer_vocab = 8192;
  double eval_fraction = 0.05;
  std::string cache_dir;  // "" : $STRATA_CACHE or ~/.cache/strata
};

struct TrainingConfig {
  int64_t steps = 200;
  int64_t batch_size = 16;       // global batch, in samples, per optimizer step
  int64_t micro_batch_size = 0;  // per rank; 0: batch_size / dp (no accumulation)
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0: off
  int64_t seed = 1337;
  int64_t eval_interval = 50;  // 0: off
  int64_t eval_batches = 4;
  std::string device = "cpu";  // cpu, cuda
  int64_t threads = 0;         // intra-op threads per rank; 0: cores / local ranks
  bool deterministic = true;
};

struct ParallelConfig {
  int64_t dp = 0;  // 0: world / (tp * pp)
  int64_t tp = 1;
  int64_t pp = 1;
  // Megatron's sequence parallelism (tp > 1): layer norms, dropout and the residual
  // stream hold seq_len/tp positions; all-gathers and reduce-scatters replace the
  // tp all-reduces.
  bool sequence_parallel = false;
  // Pipeline parallelism (parallel/pipeline): the schedule (gpipe, 1f1b, interleaved,
  // zb-h1), model chunks per rank (interleaved) and blocks per stage (auto: balanced by
  // FLOP counts; uniform; or "5,4,3").
  std::string pp_schedule = "1f1b";
  int64_t pp_virtual = 1;
  std::string pp_partition = "auto";
  bool pp_profile = true;  // auto: balance by a profile of this machine (else FLOP counts)
  double timeout_s = 60;   // every collective and the rendezvous
  // DDP (parallel/data): gradient buckets, unused parameters, buffers, comm hook.
  double bucket_cap_mb = 25;            // bucket size cap in MiB (PyTorch's default)
  double first_bucket_mb = 1;           // the first bucket (last layers) closes early
  bool find_unused_parameters = false;  // parameters without a gradient in a step
  bool broadcast_buffers = true;        // rank 0's buffers (BatchNorm stats) before each step
  std::string comm_hook = "none";       // none, fp16, bf16, powersgd
  int64_t powersgd_rank = 1;            // matrix approximation rank
  int64_t powersgd_start_iter = 1000;   // plain all-reduce before this step
  double powersgd_min_compression = 2;  // tensors compressing less are sent as they are
  bool powersgd_error_feedback = true;
  bool powersgd_warm_start = true;
  double powersgd_orth_eps = 0;  // Gram-Schmidt epsilon (0 as PyTorch)
  int64_t powersgd_seed = 0;     // random initial Q, the same on every rank
  // ZeRO (parallel/zero): 0 = plain DDP; 1 optimizer state, 2 + gradients,
  // 3 + parameters partitioned over the dp ranks.
  int64_t zero = 0;
  bool offload = false;       // optimizer state + fp32 masters in host memory, stepped there
  bool zero_prefetch = true;  // stage 3: gather the next unit while the current one runs
};

struct MemoryConfig {
  bool track = true;              // tracking allocator with per-category counters
  bool reuse_host_memory = true;  // Note [host memory reuse] (CPU training)
  // Mixed precision (memory/precision): fp32, bf16, fp16.
  std::string precision = "fp32";
  bool master_weights = true;  // half parameters + gradients, fp32 master copy in the optimizer;
                               // false: fp32 parameters, half compute (autocast style)
  // fp16 dynamic loss scaling (PyTorch GradScaler's defaults).
  double loss_scale_init = 65536;
  double loss_scale_growth = 2;
  double loss_scale_backoff = 0.5;
  int64_t loss_scale_interval = 2000;  // overflow-free steps before the scale grows
  // Activation recompute (memory/recompute): none, full, every-k, sqrt, selective.
  std::string recompute = "none";
  int64_t recompute_k = 2;  // every-k: blocks per recomputed segment
};

struct CheckpointConfig {
  std::string dir;         // "": <run_dir>/checkpoints
  int64_t interval = 0;    // steps between saves; 0: only at the end
  std::string resume;      // "": fresh start; "latest": newest in dir; or a checkpoint path
  int64_t keep = 2;        // newest checkpoints kept
  bool save_final = true;  // save after the last step
  bool async = false;      // write in a background thread (Note [async checkpoint])
  std::string init_from;   // weights (fresh optimizer, step 0) from a checkpoint or HF folder
};

struct LoggingConfig {
  std::string run_dir = "runs/default";
  int64_t log_interval = 10;          // steps between printed lines when not on a terminal
  std::string progress = "auto";      // auto, on, off: the live one-line display
  int64_t memory_timeline_steps = 2;  // first steps sampled into memory_timeline.jsonl (rank 0)
  int64_t trace_step = 3;             // step whose schedule goes to trace.json; 0: none
  double peak_tflops = 0;             // for MFU; 0: estimated from the CPU
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  ParallelConfig parallel;
  MemoryConfig memory;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
};

using FieldPtr = std::variant<std::string*, int64_t*, double*, bool*>;
struct Field {
  std::string section;
  std::string key;
  FieldPtr ptr;
};
// Every key of the config, in table order; parsing, overrides and printing all use it.
std::vector<Field> config_fields(Config& c);

// Reads a TOML file into the config; unknown sections or keys are errors.
void load_config_file(Config& c, const std::string& path);
// Applies one "section.key=value" override (the leading "--" already removed).
void apply_override(Config& c, const std::string& assignment);
// A command's config arguments: the TOML file (if any), then each "--section.key=value"
// in order; `command` names the subcommand in the hint for a malformed argument.
void apply_config_args(Config& c, const std::string& path,
                       const std::vector<std::string>& overrides, const std::string& command);
// Checks values that make sense on their own (ranges, names); layout checks need the world size.
void validate_config(const Config& c);

// training.threads as a run applies it: the configured count, else this machine's cores
// shared evenly by its `local_ranks` ranks (at least 1 each).
int64_t threads_per_rank(int64_t configured, int64_t local_ranks);
// "section.key = value" lines for the start-up table, and the config as TOML text.
std::string config_table(Config& c);
std::string config_toml(Config& c);

// Closest name (by edit distance) in candidates, for "did you mean" hints; "" if none is close.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace strata
