#include "strata/plan/plan.h"

#include "strata/core/errors.h"
#include "strata/memory/precision.h"
#include "strata/parallel/pipeline/partition.h"

namespace strata {

RunPlan plan_run(const Config& cfg, int64_t world_size, const DataShape& data,
                 const ModelSpec* custom) {
  validate_config(cfg);
  const auto& p = cfg.parallel;
  RunPlan plan;
  plan.dims = ParallelDims(p.dp, p.tp, p.pp, world_size);
  plan.spec = custom ? *custom : resolve_model_spec(cfg.model, data);
  if (is_language_model(plan.spec.family))
    plan.dims.check_model(plan.spec.n_head, plan.spec.n_layer);
  const auto& t = cfg.training;
  const int64_t dp = plan.dims.dp();
  plan.micro_batch = t.micro_batch_size > 0 ? t.micro_batch_size : t.batch_size / dp;
  STRATA_CHECK(plan.micro_batch > 0 && t.batch_size % (plan.micro_batch * dp) == 0,
               "training.batch_size=", t.batch_size,
               " must be a multiple of micro_batch_size x dp = ", plan.micro_batch, " x ", dp,
               "; change batch_size or micro_batch_size");
  plan.accum = t.batch_size / (plan.micro_batch * dp);
  return plan;
}

double resident_data_bytes(const Config& cfg) {
  if (cfg.data.source != "fashion-mnist") return 0;
  constexpr double kImages = 60000 + 10000, kPixels = 28 * 28;
  return kImages * (kPixels * 4 + 8);  // fp32 pixels, int64 labels
}

EstimateInput estimate_input(const Config& cfg, const RunPlan& plan, const std::string& device) {
  EstimateInput in;
  in.spec = plan.spec;
  in.precision = cfg.memory.precision;
  in.master_weights = cfg.memory.master_weights;
  in.recompute = parse_recompute(cfg.memory.recompute);
  in.recompute_k = cfg.memory.recompute_k;
  in.dp = plan.dims.dp();
  in.tp = plan.dims.tp();
  in.pp = plan.dims.pp();
  in.schedule = cfg.parallel.pp_schedule;
  in.pp_virtual = cfg.parallel.pp_virtual;
  if (in.pp > 1 || in.pp_virtual > 1)
    in.stage_blocks =
        stage_partition(plan.spec, cfg.parallel.pp_partition, in.pp * in.pp_virtual, in.pp_virtual);
  in.sequence_parallel = cfg.parallel.sequence_parallel && in.tp > 1;
  in.zero = cfg.parallel.zero;
  in.offload = cfg.parallel.offload;
  in.zero_prefetch = cfg.parallel.zero_prefetch;
  in.micro_batch = plan.micro_batch;
  in.micro_batches = plan.accum;
  in.comm_hook = cfg.parallel.comm_hook;
  const bool cuda = (device.empty() ? cfg.training.device : device) == "cuda";
  in.nccl = cuda;
  in.host_is_device = !cuda;
  in.data_bytes = resident_data_bytes(cfg);
  return in;
}

}  // namespace strata
