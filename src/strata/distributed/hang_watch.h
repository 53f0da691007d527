#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata {

// What the launcher knows of one local rank from its heartbeat lines (Note
// [heartbeat]), as ages in seconds at the moment of the check.
struct RankBeat {
  int64_t rank = 0;
  bool seen = false;    // a beat arrived: the rank runs Strata's training loop
  double silent_s = 0;  // since the last line
  double still_s = 0;   // since the progress counter last moved
  int64_t step = 0, progress = -1, timeout_ms = 0, seq = -1;
  bool waiting = false;
  std::string op = "-", axis = "-";
  std::vector<int64_t> group;  // the collective's members (global ranks)
  double state_s = 0;          // how long it has been computing / waiting, as of its last line
  char proc_state = '?';       // /proc/PID/stat's state: 'T' stopped, 'R' running, ...
};

// Parses one heartbeat line into `b` (the rank's slot; the ages are the caller's to
// set); false, and `b` untouched, for a line that is not one.
bool parse_beat(const std::string& line, RankBeat& b);

// Note [hang verdict]: a rank hangs when it has sent no line for longer than the
// timeout (stopped, wedged) or its progress has not moved for longer than the timeout
// while it computes (an endless loop); ranks waiting in collectives are the victims.
// "Longer than the timeout" is 0.9 of it (Note [hang threshold]).
// When every rank here waits and the longest wait passes the timeout, the hang is
// elsewhere (a lost peer on another node, a dead link): the collective's members that
// are not here are named. Pure: the launcher passes what it measured.
struct HangVerdict {
  std::vector<int64_t> hung;  // ranks to blame (empty: all here are waiting)
  std::string cause;          // one line: who hung and how
};
std::optional<HangVerdict> find_hang(const std::vector<RankBeat>& ranks);

// One line per rank saying what it was doing: the flight recorder printed when a run
// fails or hangs.
std::vector<std::string> flight_record(const std::vector<RankBeat>& ranks);

// A short phrase for one rank's state: "waiting 5.1 s in all_reduce #42 on dp at step
// 12", "computing step 12 (last: all_reduce #41 on dp)".
std::string describe_beat(const RankBeat& b);

}  // namespace strata
