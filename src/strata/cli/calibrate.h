#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

// `strata calibrate [--nproc N] [-o FILE]`: measures this machine for the cost model
// (Note [hardware profile]) and writes the profile: matrix-multiply rates over sizes in
// fp32 and bf16, element-wise memory bandwidth, and each collective's latency and
// bandwidth over 2..N ranks on the backend in use (one `strata launch` per group size,
// each rank running calibrate-worker).
struct CalibrateArgs {
  int64_t nproc = 2;
  std::string out;      // default: ~/.cache/strata/profiles/<host>-<threads>t.json
  int64_t threads = 0;  // intra-op threads per rank; 0: cores / nproc, as a run's default
  bool quick = false;   // fewer sizes and repeats (tests)
};
int run_calibrate(const CalibrateArgs& a, const std::string& self_exe);
// One launched rank: times the collectives at its world size and the compute mix with
// every rank running it at once; rank 0 writes the fits (JSON: op -> {latency_s, bytes_per_s}) and
// that mix's seconds
// ("compute_s") to out. With probe (Note [the collectives now]) it times each collective
// at kProbeBytes only (op -> {seconds, bytes}) and skips the mix. Either way a world
// that divides into groups adds "loaded": group size -> the same for its groups at once.
int run_calibrate_worker(const std::string& out, bool quick, bool probe, int64_t threads);
// Launches calibrate-worker over `nproc` ranks of this machine (`flag`: "", "--quick" or
// "--probe") and returns what its rank 0 wrote; `who` names the command in its error.
nlohmann::json collective_benchmark(const std::string& self_exe, int64_t nproc, int64_t threads,
                                    const std::string& flag, const std::string& who);

}  // namespace strata
