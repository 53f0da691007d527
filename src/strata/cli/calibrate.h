#pragma once
#include <cstdint>
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
// every rank running it at once; rank 0 writes the fits (JSON: op -> {latency_s,
// bytes_per_s}) and that mix's seconds ("compute_s") to out.
int run_calibrate_worker(const std::string& out, bool quick, int64_t threads);

}  // namespace strata
