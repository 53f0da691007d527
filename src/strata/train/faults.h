#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace strata {

// Note [fault injection]: failures on purpose, for the restart and hang tests and for
// drills on a real cluster. STRATA_FAULT="KIND:RANK:STEP" makes rank RANK fail at the
// start of 1-based step STEP, on the first start only (a restarted run, STRATA_RESTART
// >= 1, runs clean; "KIND:RANK:STEP:always" fails every start, to use restarts up):
//   kill   SIGKILL itself           stop   SIGSTOP itself (a wedged process)
//   hang   spin forever, heartbeat still beating (a rank stuck computing)
//   exit   exit with status 1
//   kill-in-write   SIGKILL itself halfway through writing step STEP's checkpoint
enum class FaultKind { kKill, kStop, kHang, kExit, kKillInWrite };
struct Fault {
  FaultKind kind = FaultKind::kKill;
  int64_t step = 0;
};
// This rank's fault, if STRATA_FAULT names it; a malformed value is a user error.
std::optional<Fault> fault_from_env(int64_t rank);
// Makes the fault happen (does not return, except for nothing to do).
[[noreturn]] void trigger_fault(const Fault& f);

// Note [injected overflow]: STRATA_INJECT_INF="RANK:STEP[,STEP...]" puts an inf into
// one gradient element on that rank after backward (after DDP's all-reduce, so no
// other rank sees it) at those 1-based steps. Tests use it to check that every rank
// skips the step and the loss scale backs off.
std::vector<int64_t> inject_inf_steps(int64_t rank);

}  // namespace strata
