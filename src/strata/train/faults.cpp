#include "strata/train/faults.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "strata/core/env.h"
#include "strata/core/errors.h"

namespace strata {

std::optional<Fault> fault_from_env(int64_t rank) {
  const auto v = get_env("STRATA_FAULT");
  if (!v || v->empty()) return std::nullopt;
  std::stringstream ss(*v);
  std::string kind, r, s, when;
  std::getline(ss, kind, ':');
  std::getline(ss, r, ':');
  std::getline(ss, s, ':');
  std::getline(ss, when, ':');
  STRATA_CHECK(when.empty() || when == "always", "STRATA_FAULT=", *v,
               ": the fourth field can only be 'always', e.g. kill:1:12:always");
  if (when.empty() && get_env_int("STRATA_RESTART").value_or(0) > 0) return std::nullopt;
  Fault f;
  if (kind == "kill")
    f.kind = FaultKind::kKill;
  else if (kind == "stop")
    f.kind = FaultKind::kStop;
  else if (kind == "hang")
    f.kind = FaultKind::kHang;
  else if (kind == "exit")
    f.kind = FaultKind::kExit;
  else if (kind == "kill-in-write")
    f.kind = FaultKind::kKillInWrite;
  else
    STRATA_FAIL("STRATA_FAULT=", *v, ": unknown kind '", kind,
                "'; use kill, stop, hang, exit or kill-in-write, e.g. kill:1:12");
  try {
    f.step = std::stoll(s);
    if (std::stoll(r) != rank) return std::nullopt;
  } catch (const std::exception&) {
    STRATA_FAIL("STRATA_FAULT=", *v, " must be KIND:RANK:STEP, e.g. kill:1:12");
  }
  return f;
}

void trigger_fault(const Fault& f) {
  std::fprintf(stderr, "fault injection (STRATA_FAULT): %s at step %lld\n",
               f.kind == FaultKind::kStop   ? "SIGSTOP"
               : f.kind == FaultKind::kHang ? "spinning forever"
               : f.kind == FaultKind::kExit ? "exit 1"
                                            : "SIGKILL",
               static_cast<long long>(f.step));
  std::fflush(stderr);
  switch (f.kind) {
    case FaultKind::kStop:
      raise(SIGSTOP);
      // Woken by SIGCONT (the launcher stopping it): go on stopping.
      raise(SIGKILL);
      break;
    case FaultKind::kHang:
      for (volatile uint64_t spin = 0;;) spin = spin + 1;
    case FaultKind::kExit:
      std::_Exit(1);
    case FaultKind::kKill:
    case FaultKind::kKillInWrite:
      raise(SIGKILL);
  }
  std::abort();
}

std::vector<int64_t> inject_inf_steps(int64_t rank) {
  const char* v = std::getenv("STRATA_INJECT_INF");
  if (!v || !*v) return {};
  std::string spec(v);
  const auto colon = spec.find(':');
  STRATA_CHECK(colon != std::string::npos, "STRATA_INJECT_INF=", spec,
               " must be RANK:STEP[,STEP...], e.g. 1:5,6");
  if (std::stoll(spec.substr(0, colon)) != rank) return {};
  std::vector<int64_t> steps;
  std::stringstream ss(spec.substr(colon + 1));
  for (std::string item; std::getline(ss, item, ',');) steps.push_back(std::stoll(item));
  return steps;
}

}  // namespace strata
