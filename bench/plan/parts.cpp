// The cost model's parts against this machine: for a flavour and micro-batch sizes,
// times one block, the embedding and the head (forward + backward, one rank alone,
// the stage profile's way) and prints them beside predict_parts for the profile, so a
// wrong term shows as one part's ratio rather than a whole step's.
//
//   strata_bench_plan_parts PROFILE FLAVOUR[:D_MODEL:N_HEAD:N_LAYER] THREADS MB [MB ...]
#include <ATen/Parallel.h>

#include <cinttypes>
#include <cstdio>
#include <string>

#include "strata/core/config.h"
#include "strata/memory/process_memory.h"
#include "strata/models/flavours.h"
#include "strata/parallel/pipeline/profile.h"
#include "strata/plan/cost_model.h"

using namespace strata;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s PROFILE FLAVOUR THREADS MB [MB ...]\n", argv[0]);
    return 2;
  }
  keep_freed_host_memory();  // as the trainer does: large blocks are reused, not re-faulted
  const HardwareProfile hw = load_profile(argv[1]);
  at::set_num_threads(std::stoi(argv[3]));
  ModelConfig mc;
  // FLAVOUR or FLAVOUR:D_MODEL:N_HEAD:N_LAYER (a wider model of the flavour's kind).
  const std::string f = argv[2];
  const auto colon = f.find(':');
  mc.flavour = f.substr(0, colon);
  if (colon != std::string::npos)
    std::sscanf(f.c_str() + colon + 1, "%" SCNd64 ":%" SCNd64 ":%" SCNd64, &mc.d_model, &mc.n_head,
                &mc.n_layer);
  const ModelSpec spec = resolve_model_spec(mc, DataShape{});
  std::printf("%4s %10s %10s %6s %10s %10s %6s %10s %10s %6s\n", "mb", "block ms", "predicted",
              "ratio", "embed ms", "predicted", "ratio", "head ms", "predicted", "ratio");
  for (int i = 4; i < argc; ++i) {
    const int64_t mb = std::stoll(argv[i]);
    const StageCosts m = profile_stage_costs(spec, mb, at::kCPU, 7);
    Layout l;
    l.micro_batch = mb;
    const PartCosts p = predict_parts(spec, l, {"fp32", mb, 0.5}, hw);
    const double pb = p.block_forward + p.block_backward, pf = p.first_forward + p.first_backward,
                 pl = p.last_forward + p.last_backward;
    std::printf("%4lld %10.3f %10.3f %6.2f %10.3f %10.3f %6.2f %10.3f %10.3f %6.2f\n",
                static_cast<long long>(mb), m.block[0] * 1e3, pb * 1e3, pb / m.block[0],
                m.first * 1e3, pf * 1e3, pf / m.first, m.last * 1e3, pl * 1e3, pl / m.last);
  }
  return 0;
}
