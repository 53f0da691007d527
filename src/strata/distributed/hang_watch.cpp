#include "strata/distributed/hang_watch.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace strata {
namespace {

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string collective(const RankBeat& b) {
  return c10::str(b.op, " #", b.seq, " on ", b.axis);
}

// How long the rank has been in its state now: its age at the last line plus the silence.
double state_age(const RankBeat& b) {
  return b.state_s + b.silent_s;
}

double timeout_s(const RankBeat& b) {
  return static_cast<double>(b.timeout_ms) / 1000.0;
}

// Note [hang threshold]: the ranks waiting for a hung one give up when their collective
// times out, parallel.timeout_s after they entered it. Judging at 0.9 of it names the
// hung rank first, while the others still say what they wait on; beats come every
// timeout / 8, so a live rank is never that silent.
constexpr double kJudgeAt = 0.9;

}  // namespace

bool parse_beat(const std::string& line, RankBeat& b) {
  std::istringstream in(line);
  std::string tag, state;
  RankBeat n = b;
  int64_t state_ms = 0;
  std::string group;
  if (!(in >> tag) || tag != "hb") return false;
  if (!(in >> n.rank >> n.step >> n.progress >> n.timeout_ms >> state >> n.op >> n.axis >> n.seq >>
        state_ms >> group))
    return false;
  n.group.clear();
  std::stringstream gs(group);
  for (std::string r; std::getline(gs, r, ',');)
    if (!r.empty() && r != "-") n.group.push_back(std::atoll(r.c_str()));
  if (state != "wait" && state != "compute") return false;
  n.waiting = state == "wait";
  n.state_s = static_cast<double>(state_ms) / 1000.0;
  n.seen = true;
  b = n;
  return true;
}

std::string describe_beat(const RankBeat& b) {
  if (!b.seen) return "sent no heartbeat (still setting up)";
  const double age = state_age(b);
  std::string s = b.waiting
                      ? c10::str("waiting ", secs(age), " in ", collective(b), " at step ", b.step)
                      : c10::str("computing step ", b.step, " for ", secs(age),
                                 b.seq >= 0 ? " (last: " + collective(b) + ")" : "");
  if (b.silent_s > kJudgeAt * timeout_s(b))
    s = c10::str("silent for ", secs(b.silent_s),
                 b.proc_state == 'T' || b.proc_state == 't' ? " (process stopped)" : "",
                 "; last seen ", s);
  return s;
}

std::optional<HangVerdict> find_hang(const std::vector<RankBeat>& ranks) {
  HangVerdict v;
  std::string how;
  bool any = false, all_waiting = true;
  const RankBeat* oldest = nullptr;  // the longest wait, when all wait
  for (const RankBeat& b : ranks) {
    if (!b.seen || b.timeout_ms <= 0) {
      all_waiting = false;
      continue;
    }
    any = true;
    const double t = kJudgeAt * timeout_s(b);
    const bool silent = b.silent_s > t;
    const bool looping = !b.waiting && b.still_s > t;
    if (silent || looping) {
      v.hung.push_back(b.rank);
      if (how.empty()) how = c10::str("rank ", b.rank, " hung: ", describe_beat(b));
    }
    if (!b.waiting)
      all_waiting = false;
    else if (!oldest || state_age(b) > state_age(*oldest))
      oldest = &b;
  }
  if (!v.hung.empty()) {
    v.cause = how;
    if (v.hung.size() > 1) v.cause += c10::str(" (hung ranks: ", c10::Join(",", v.hung), ")");
    return v;
  }
  // Nobody here computes and one has waited past the threshold: its collective's first
  // timeout is near, and no rank here can be the cause.
  if (any && all_waiting && oldest && state_age(*oldest) > kJudgeAt * timeout_s(*oldest)) {
    // The members of the collective that are not here are the ones not answering.
    const RankBeat& b = *oldest;
    std::vector<int64_t> away;
    for (int64_t r : b.group)
      if (std::none_of(ranks.begin(), ranks.end(), [&](const RankBeat& x) { return x.rank == r; }))
        away.push_back(r);
    v.cause = c10::str("every rank on this node has waited ", secs(state_age(b)),
                       " in a collective (rank ", b.rank, ": ", collective(b),
                       b.group.empty() ? "" : " with ranks " + c10::Join(",", b.group), "): ",
                       away.empty() ? std::string("the ranks here wait on each other (mismatched "
                                                  "collectives) or on a peer on another node")
                                    : "rank(s) " + c10::Join(",", away) +
                                          " on another node or the link to it is lost");
    return v;
  }
  return std::nullopt;
}

std::vector<std::string> flight_record(const std::vector<RankBeat>& ranks) {
  std::vector<std::string> out;
  for (const RankBeat& b : ranks) out.push_back(c10::str("rank ", b.rank, ": ", describe_beat(b)));
  return out;
}

}  // namespace strata
