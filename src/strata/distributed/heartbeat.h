#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace strata {

// Note [heartbeat]: a rank started by `strata launch` finds the write end of a pipe
// in STRATA_HEARTBEAT_FD. A thread writes one line to it several times per
// parallel.timeout_s saying where the rank is: its step, a progress counter that
// moves at every step and every collective, and whether it is computing or waiting
// in a collective (which op, on which axis, its sequence number on that axis, for
// how long). The launcher reads these lines (distributed/hang_watch) and so tells a
// rank that stopped (no lines: SIGSTOP, a wedged process) or loops without progress
// (lines, but the counter stands while computing) from the ranks that wait for it,
// and names who hung and what everyone was doing: Strata's flight recorder. Without
// the variable (a rank not started by strata launch) every call is a cheap no-op.
//
// The line format (one per beat, space separated):
//   hb RANK STEP PROGRESS TIMEOUT_MS STATE OP AXIS SEQ STATE_MS GROUP
// STATE is "compute" or "wait"; OP/AXIS/SEQ/GROUP name the collective waited on (GROUP:
// its members' global ranks, "0,1,2,3"), or, while computing, the last one finished
// ("-" before the first). And once, after set-up:
//   start RANK STEP      (the step training starts from: 0, or the resumed step)
namespace heartbeat {

// Starts the beat thread if STRATA_HEARTBEAT_FD is set; the timeout is the run's
// parallel.timeout_s, which the launcher uses as its hang threshold.
void start(int64_t rank, std::chrono::milliseconds timeout);
// Says training starts at `step` (after a resume, the checkpoint's step).
void started(int64_t step);
// Training is at `step` (1-based, the step being run).
void set_step(int64_t step);
// Progress inside a step (a micro-batch's forward or backward, an evaluation batch, a
// checkpoint piece), so a long phase without collectives does not look stuck.
void tick();
// Stops the thread (at the end of training; also at exit).
void stop();

// Marks this thread as blocked in a collective for its lifetime.
class Waiting {
 public:
  Waiting(const std::string& op, const std::string& axis, int64_t seq, const std::string& group);
  ~Waiting();
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;
};

// The beat interval for a timeout: several beats fit in it, at most one a second.
std::chrono::milliseconds interval_for(std::chrono::milliseconds timeout);

}  // namespace heartbeat
}  // namespace strata
