#pragma once
#include <string>
#include <vector>

namespace strata {

struct LaunchOptions {
  int64_t nproc_per_node = 1;
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::string master_port = "29500";  // a number, or "auto" / "0" for a free port
  double stop_grace_s = 3.0;          // SIGTERM to SIGKILL when stopping the others
  // A signal forwarded from the user (SIGTERM, SIGINT, SIGHUP) asks for a graceful stop:
  // ranks finish their step (and a checkpoint being written) first; SIGKILL after this.
  double signal_grace_s = 60.0;
  // Note [restarts]: after a rank fails (exits non-zero, is killed, or hangs) every rank
  // is stopped and all are started again, up to this many times; Strata's trainer then
  // resumes from the latest complete checkpoint (STRATA_RESTART tells it).
  int64_t max_restarts = 0;
  std::vector<std::string> command;  // program and arguments
};

// Starts nproc_per_node local ranks of `command` with torchrun's environment and
// supervises them: output lines are prefixed "[rank N] ", SIGINT/SIGTERM/SIGHUP are
// forwarded, and when one rank fails the others are stopped (SIGTERM, then SIGKILL
// after stop_grace_s) so the whole job ends within seconds instead of hanging. Each
// rank's heartbeat (Note [heartbeat]) shows a rank that stopped or stopped making
// progress: it is named with what every rank was doing, and all are killed. Then,
// while restarts remain, everything starts again (Note [restarts]).
// Ranks die with the launcher (PR_SET_PDEATHSIG). Returns the exit status for the
// launcher: 0 when every rank exited 0.
int launch(const LaunchOptions& opts);

// The signal's name ("SIGKILL") for status messages.
std::string signal_name(int sig);

}  // namespace strata
