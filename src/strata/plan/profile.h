#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata {

// Note [hardware profile]: what the cost model knows of a machine, measured by
// `strata calibrate` or written by hand from a datasheet (profiles/*.json):
//  - gemm: for each dtype, matrix-multiply throughput at increasing sizes (FLOPs per
//    call and the seconds it took), so small multiplies cost what they really cost
//    and not size / peak;
//  - memory_bytes_per_s: element-wise work (read + write) on large tensors;
//  - collectives: for each op ("all_reduce", "all_gather", "reduce_scatter",
//    "send_recv") and group size, latency alpha and bandwidth beta of the fit
//    t = alpha + bytes / beta (bytes: one rank's buffer); loaded_collectives: the same
//    for groups smaller than a world, timed with all of that world's groups at once;
//  - links (hand-written profiles of clusters): the intra- and inter-node link a
//    collective over that many ranks would run on, when no measured fit exists;
//  - kernels: the non-GEMM work a transformer step is made of, each timed forward and
//    backward at increasing sizes (the "work" of a call: elements, or for attention
//    FLOPs): "cross_entropy" (fp32 logits), "layer_norm/<dtype>", "gelu/<dtype>",
//    "attention/<dtype>" (the fused kernel), "adamw" (one fp32 parameter's update);
//    absent in hand-written profiles, where the cost model falls back to bytes over
//    the memory bandwidth and to the GEMM rate;
//  - op_overhead_s: one small autograd op's forward and backward, the floor every op
//    pays however small (it dominates small micro-batches on CPUs);
//  - host<->device copy bandwidth (0 on CPU: offload moves nothing across a bus).
// Pure: the lookups are tested against hand-made profiles.

// The least tp_collective_scale a profile may hold (and calibrate fits).
inline constexpr double kLeastTpCollectiveScale = 0.1;
// The least zero_collective_scale a profile may hold (and calibrate fits).
inline constexpr double kLeastZeroCollectiveScale = 0.1;

struct GemmPoint {
  double flops = 0, seconds = 0;  // one call
};
struct KernelPoint {
  double work = 0, seconds = 0;  // one call
};
struct LinkFit {
  double latency_s = 0, bytes_per_s = 0;
  double seconds(double bytes) const { return latency_s + bytes / bytes_per_s; }
};
struct HardwareProfile {
  std::string name, device = "cpu", backend = "gloo";
  int64_t threads = 1;         // intra-op threads per rank it was measured with
  int64_t cores = 0;           // CPU profiles: the machine's cores (its ranks share them)
  int64_t ranks_per_node = 1;  // links: groups up to this size stay in one node
  std::map<std::string, std::vector<GemmPoint>> gemm;  // "fp32", "bf16": by flops
  double memory_bytes_per_s = 0;
  std::map<std::string, std::map<int64_t, LinkFit>> collectives;  // op -> group size -> fit
  // CPU profiles: collectives over groups smaller than the world, timed with every group
  // of the world at it at once (Note [collectives in a loaded world]): op -> world ->
  // group size -> fit.
  std::map<std::string, std::map<int64_t, std::map<int64_t, LinkFit>>> loaded_collectives;
  LinkFit intra_node, inter_node;                           // a hand-written profile's
  std::map<std::string, std::vector<KernelPoint>> kernels;  // name -> by work
  double op_overhead_s = 0;
  // CPU profiles: how much slower each of g ranks computes with all g running than
  // one alone (Note [contention]); group sizes not measured scale by threads / cores.
  std::map<int64_t, double> contention;
  // Measured steps of a reference model over predicted ones, by ranks (Note [step
  // calibration]); group sizes not measured take the nearest below (1 when none).
  std::map<int64_t, double> step_scale;
  // The same from a tensor-parallel reference run (tp=2), for layouts with tp > 1
  // (Note [tensor-parallel step scale]); empty: step_scale.
  std::map<int64_t, double> tp_step_scale;
  // CPU profiles: what a tensor-parallel group's collectives cost in a run over what the
  // loaded fits say, by world, at the message sizes measured (Note [tensor-parallel
  // collectives in a run]): world -> bytes -> factor; none: 1.
  std::map<int64_t, std::map<double, double>> tp_collective_scale;
  // CPU profiles: what ZeRO's collectives cost in a run over what the fits say, by
  // world (Note [ZeRO collectives in a loaded world]); none: 1.
  std::map<int64_t, double> zero_collective_scale;
  // CPU profiles: what a pipeline's tensor-parallel pair pays to start each activation
  // all-reduce in a run over the loaded fit's latency, by world (Note [a pipeline's tp
  // pair in a run]); none: the dp x tp factor, never below the fit.
  std::map<int64_t, double> pipeline_tp_latency_scale;
  double host_to_device_bytes_per_s = 0, device_to_host_bytes_per_s = 0;
  double device_memory_bytes = 0;  // per device (0: not said; CPU profiles)

  // Seconds of a multiply of `flops` in dtype: the measured rate at the nearest sizes,
  // interpolated in log(flops); below the smallest point, that point's time (latency).
  double gemm_seconds(const std::string& dtype, double flops) const;
  // Seconds of kernel `name` on `work`, interpolated as gemm_seconds; `fallback` when
  // the profile has no such kernel.
  double kernel_seconds(const std::string& name, double work, double fallback) const;
  // The slowdown of compute on each of `ranks` ranks (on average; a fraction when some
  // wait) sharing the machine: the measured contention, linear between the measured
  // sizes (one rank: 1), else (ranks x threads / cores) when that exceeds 1.
  double compute_share(double ranks) const;
  // The step scale for `ranks` ranks: the nearest measured size below, 1 when none.
  double step_scale_for(int64_t ranks, bool tp = false) const;
  // The tp collective scale for a world of `ranks` and a message of `bytes`: the
  // measured factors interpolated in log(bytes), the nearest one beyond them; 1 where
  // that world has none.
  double tp_collective_scale_for(int64_t ranks, double bytes) const;
  // The ZeRO collective scale for a world of `ranks`: its own, else 1 (it is measured
  // only where the ranks outnumber the cores, and is not carried to other worlds).
  double zero_collective_scale_for(int64_t ranks) const;
  // The pipeline pair's latency scale for a world of `ranks`: its own, else none (it is
  // measured only in worlds that hold a pp=2 x tp=2 reference, and not carried to others).
  std::optional<double> pipeline_tp_latency_scale_for(int64_t ranks) const;
  // CPU profiles: what stretches each rank's compute with `ranks` ranks computing (a
  // fraction when some wait), the trainer's own work included: the contention times
  // the step scale at each measured world, linear between them (Note [step
  // calibration]: the product is what a reference run measures, steadier than either;
  // Note [calibrated worlds]), and between whole numbers of ranks beyond the largest.
  double compute_slowdown(double ranks, bool tp = false) const;
  // The highest measured rate (FLOP/s), the peak MFU is reported against.
  double peak_flops(const std::string& dtype) const;
  // Seconds of one collective over `group` ranks on `bytes` per rank: the measured fit
  // for that group size (the nearest measured size, its bandwidth scaled by the ring's
  // (g-1)/g), else the ring algorithm over the link it would use.
  // `span`: how many consecutive ranks the group's members lie across (Note [rank grid]:
  // a dp group spans dp x tp ranks, pipeline neighbours dp x tp + 1), which decides
  // whether an unmeasured group runs on the intra- or inter-node link; 0: the group.
  // `world`: the run's ranks; a group smaller than it takes the loaded fit measured in
  // that world where there is one.
  double collective_seconds(const std::string& op, int64_t group, double bytes, int64_t span = 0,
                            int64_t world = 0) const;
};

nlohmann::json profile_json(const HardwareProfile& p);
// One error line naming the field for a malformed profile.
HardwareProfile profile_from_json(const nlohmann::json& j, const std::string& where);
HardwareProfile load_profile(const std::string& path);

// Where `strata calibrate` keeps this machine's profile for `threads` per rank
// (~/.cache/strata/profiles/<host>-<threads>t.json).
std::string default_profile_path(int64_t threads);

// Note [profile threads]: a CPU profile's rates are those of its `threads` intra-op
// threads per rank; ranks that run another number (strata plan --nproc 1 on a profile
// from calibrate --nproc 4 runs 2 threads here, not 1) compute at another speed, and
// the 1-rank debug GPT was priced at twice its measured step. Empty when they match (or
// the profile is a GPU's, which the threads do not drive); else one line naming both
// and the fix.
std::string profile_threads_mismatch(const HardwareProfile& hw, int64_t threads);

// Least-squares fit t = alpha + bytes / beta over (bytes, seconds) samples; alpha >= 0.
LinkFit fit_link(const std::vector<std::pair<double, double>>& samples);

}  // namespace strata
