#include "strata/distributed/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "strata/core/errors.h"
#include "strata/distributed/hang_watch.h"
#include "strata/distributed/rendezvous.h"

namespace strata {
namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  unsigned char s = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = write(g_signal_pipe[1], &s, 1);
}

using Clock = std::chrono::steady_clock;

struct Child {
  int64_t local_rank = 0;
  int64_t rank = 0;
  pid_t pid = -1;
  int out_fd = -1;  // stdout and stderr share one pipe, prefixed line by line
  std::string partial;
  int hb_fd = -1;  // heartbeat lines (Note [heartbeat])
  std::string hb_partial;
  RankBeat beat;
  Clock::time_point last_line, progress_at;
  int64_t start_step = -1;  // from its "start" line
  bool exited = false;
  int status = 0;
};

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

// Error lines already printed by another rank (the same user error hits every
// rank): printed once, so a bad config gives one line, not one per rank.
std::set<std::string> g_errors_seen;

bool duplicate_error(const std::string& line) {
  if (line.rfind("error: ", 0) != 0) return false;
  return !g_errors_seen.insert(line).second;
}

// Prefixes complete lines with the rank.
void emit(Child& c, const char* data, size_t n, bool flush) {
  c.partial.append(data, n);
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i < c.partial.size(); ++i) {
    if (c.partial[i] == '\n') {
      std::string line = c.partial.substr(start, i - start + 1);
      if (!duplicate_error(line)) out += "[rank " + std::to_string(c.rank) + "] " + line;
      start = i + 1;
    }
  }
  c.partial.erase(0, start);
  if (flush && !c.partial.empty()) {
    out += "[rank " + std::to_string(c.rank) + "] " + c.partial + "\n";
    c.partial.clear();
  }
  if (!out.empty()) write_all(STDOUT_FILENO, out);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
  return "ended with raw status " + std::to_string(status);
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// The process state letter from /proc/PID/stat ('T': stopped), '?' if unknown.
char proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

// Reads what a rank's heartbeat pipe holds; false at end of file.
bool read_beats(Child& c, Clock::time_point now) {
  char buf[4096];
  ssize_t n = read(c.hb_fd, buf, sizeof(buf));
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return false;
  if (n < 0) return true;
  c.hb_partial.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t i; (i = c.hb_partial.find('\n', start)) != std::string::npos; start = i + 1) {
    const std::string line = c.hb_partial.substr(start, i - start);
    const int64_t before = c.beat.progress;
    if (parse_beat(line, c.beat)) {
      c.last_line = now;
      if (c.beat.progress != before) c.progress_at = now;
    } else if (line.rfind("start ", 0) == 0) {
      c.start_step = std::atoll(line.c_str() + line.rfind(' ') + 1);
    } else if (line.rfind("stop ", 0) == 0) {
      c.beat.seen = false;  // training is over: teardown is not watched
    }
  }
  c.hb_partial.erase(0, start);
  return true;
}

// The running ranks' beats (all of them with `exited`), aged to now.
std::vector<RankBeat> beats_now(const std::vector<Child>& children, Clock::time_point now,
                                bool exited = false) {
  std::vector<RankBeat> out;
  for (const Child& c : children) {
    if (c.exited && !exited) continue;
    RankBeat b = c.beat;
    b.rank = c.rank;
    b.silent_s = std::chrono::duration<double>(now - c.last_line).count();
    b.still_s = std::chrono::duration<double>(now - c.progress_at).count();
    if (!c.exited) b.proc_state = proc_state(c.pid);
    out.push_back(b);
  }
  return out;
}

void print_flight_record(const std::vector<RankBeat>& beats) {
  std::string out;
  for (const auto& line : flight_record(beats)) out += "strata launch:   " + line + "\n";
  write_all(STDERR_FILENO, out);
}

// How one start of the ranks ended.
struct Attempt {
  int code = 0;              // the launcher's exit status if this is the last attempt
  std::string cause;         // what failed, one line ("" when all exited 0)
  bool interrupted = false;  // a signal from the user: never restarted
};

Attempt run_attempt(const LaunchOptions& o, int64_t port, int64_t attempt) {
  const int64_t world = o.nproc_per_node * o.nnodes;
  std::vector<Child> children(static_cast<size_t>(o.nproc_per_node));
  const auto started = Clock::now();
  for (int64_t i = 0; i < o.nproc_per_node; ++i) {
    Child& c = children[static_cast<size_t>(i)];
    c.local_rank = i;
    c.rank = o.node_rank * o.nproc_per_node + i;
    c.last_line = c.progress_at = started;
    int fds[2], hb[2];
    STRATA_CHECK(pipe2(fds, O_CLOEXEC) == 0 && pipe2(hb, O_CLOEXEC) == 0,
                 "pipe: ", std::strerror(errno));
    pid_t parent = getpid();
    // Note [launcher signals in a fresh rank]: a rank forked with the launcher's
    // handlers would, if signalled before it resets them (the launcher stopping the
    // others after a rank's failure, before this one ran at all), write into the
    // launcher's signal pipe, and the launcher would take it for its own SIGTERM: seen
    // once in CI, a 2-rank launch whose rank 1 exited 5 at once reported "received
    // SIGTERM" and exited 143. So the signals are blocked across the fork and the child
    // resets its handlers before unblocking them (a pending one then takes its default
    // action: the rank stops, as asked).
    sigset_t block, previous;
    sigemptyset(&block);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, &previous);
    pid_t pid = fork();
    if (pid != 0) pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    STRATA_CHECK(pid >= 0, "fork failed: ", std::strerror(errno));
    if (pid == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(137);
      setpgid(0, 0);  // its own group, so stopping it stops its children too
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      const int hb_fd = dup(hb[1]);  // without O_CLOEXEC: the command inherits it
      setenv("RANK", std::to_string(c.rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(i).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node).c_str(), 1);
      setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
      setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("STRATA_LAUNCHED", "1", 1);
      setenv("STRATA_HEARTBEAT_FD", std::to_string(hb_fd).c_str(), 1);
      setenv("STRATA_RESTART", std::to_string(attempt).c_str(), 1);
      setenv("STRATA_MAX_RESTARTS", std::to_string(o.max_restarts).c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "error: cannot run '%s': %s; check the command after --\n", argv[0],
                   std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    close(hb[1]);
    fcntl(hb[0], F_SETFL, O_NONBLOCK);
    c.pid = pid;
    c.out_fd = fds[0];
    c.hb_fd = hb[0];
  }

  std::optional<Clock::time_point> kill_at;
  int first_bad = -1;  // index of the first failing rank
  int forwarded_signal = 0;
  std::string hang;              // the hang verdict's cause, once found
  std::string bad_at;            // " at step N" of the failing rank
  std::vector<RankBeat> record;  // the flight record when the failure was seen
  bool reported_start = attempt == 0;
  auto stop_others = [&](int sig, double grace_s) {
    for (auto& c : children)
      if (!c.exited) {
        kill(-c.pid, sig), kill(c.pid, sig);
        kill(-c.pid, SIGCONT), kill(c.pid, SIGCONT);  // a stopped rank takes the signal
      }
    const auto at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
    if (!kill_at || at < *kill_at) kill_at = at;
  };

  size_t running = children.size();
  while (running > 0 ||
         std::any_of(children.begin(), children.end(), [](auto& c) { return c.out_fd >= 0; })) {
    std::vector<pollfd> pfds;
    pfds.push_back({g_signal_pipe[0], POLLIN, 0});
    for (auto& c : children) {
      if (c.out_fd >= 0) pfds.push_back({c.out_fd, POLLIN, 0});
      if (c.hb_fd >= 0) pfds.push_back({c.hb_fd, POLLIN, 0});
    }
    poll(pfds.data(), pfds.size(), 100);
    const auto now = Clock::now();
    if (pfds[0].revents & POLLIN) {
      unsigned char s;
      while (read(g_signal_pipe[0], &s, 1) == 1) forwarded_signal = s;
      if (forwarded_signal) stop_others(forwarded_signal, o.signal_grace_s);
    }
    for (size_t p = 1; p < pfds.size(); ++p) {
      if (!(pfds[p].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      for (auto& c : children) {
        if (c.hb_fd == pfds[p].fd) {
          if (!read_beats(c, now)) close(c.hb_fd), c.hb_fd = -1;
          continue;
        }
        if (c.out_fd != pfds[p].fd) continue;
        char buf[65536];
        ssize_t n = read(c.out_fd, buf, sizeof(buf));
        if (n > 0) {
          emit(c, buf, static_cast<size_t>(n), false);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          emit(c, "", 0, true);
          close(c.out_fd);
          c.out_fd = -1;
        }
      }
    }
    if (!reported_start && children[0].start_step >= 0) {
      reported_start = true;
      std::fprintf(stderr, "strata launch: restart %lld: training resumed at step %lld\n",
                   static_cast<long long>(attempt), static_cast<long long>(children[0].start_step));
    }
    for (size_t i = 0; i < children.size(); ++i) {
      Child& c = children[i];
      if (c.exited) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.exited = true;
        c.status = status;
        --running;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && first_bad < 0 && hang.empty() && !forwarded_signal) {
          first_bad = static_cast<int>(i);
          record = beats_now(children, now, true);
          if (c.beat.seen) bad_at = " at step " + std::to_string(c.beat.step);
          // A rank that failed in a collective usually waited for one that hung.
          std::vector<RankBeat> alive;
          for (const RankBeat& b : record)
            if (b.rank != c.rank) alive.push_back(b);
          if (auto v = find_hang(alive); v && !v->hung.empty()) hang = v->cause;
          if (running > 0) stop_others(SIGTERM, o.stop_grace_s);
        }
      }
    }
    if (first_bad < 0 && hang.empty() && !forwarded_signal && running > 0) {
      std::vector<RankBeat> beats = beats_now(children, now);
      if (auto v = find_hang(beats)) {
        hang = v->cause;
        record = beats;
        std::fprintf(stderr, "strata launch: %s; stopping every rank\n", hang.c_str());
        print_flight_record(record);
        stop_others(SIGKILL, 0);
      }
    }
    if (kill_at && Clock::now() > *kill_at) {
      for (auto& c : children)
        if (!c.exited) kill(-c.pid, SIGKILL), kill(c.pid, SIGKILL);
      // Output pipes may be held by grandchildren that survived: stop reading soon after.
      if (running == 0) {
        for (auto& c : children) {
          if (c.out_fd >= 0) emit(c, "", 0, true), close(c.out_fd), c.out_fd = -1;
          if (c.hb_fd >= 0) close(c.hb_fd), c.hb_fd = -1;
        }
      }
    }
  }
  for (auto& c : children)
    if (c.hb_fd >= 0) close(c.hb_fd);

  Attempt out;
  if (forwarded_signal) {
    std::fprintf(stderr, "strata launch: received %s; stopped all %lld ranks\n",
                 signal_name(forwarded_signal).c_str(), static_cast<long long>(children.size()));
    out.code = 128 + forwarded_signal;
    out.interrupted = true;
    return out;
  }
  if (first_bad >= 0) {
    const Child& c = children[static_cast<size_t>(first_bad)];
    out.cause = c10::str("rank ", c.rank, " (pid ", c.pid, ") ", describe(c.status), bad_at);
    if (!hang.empty()) out.cause = hang + "; then " + out.cause;
    std::fprintf(stderr, "strata launch: %s; stopped the other ranks\n", out.cause.c_str());
    if (!record.empty() &&
        std::any_of(record.begin(), record.end(), [](auto& b) { return b.seen; }))
      print_flight_record(record);
    out.code = exit_code(c.status) == 0 ? 1 : exit_code(c.status);
    return out;
  }
  if (!hang.empty()) {
    out.cause = hang;
    out.code = 1;
  }
  return out;
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

int launch(const LaunchOptions& o) {
  STRATA_CHECK(!o.command.empty(),
               "strata launch needs a command after --, e.g. "
               "strata launch --nproc-per-node 2 -- strata train");
  STRATA_CHECK(o.nproc_per_node >= 1, "--nproc-per-node=", o.nproc_per_node, " must be at least 1");
  STRATA_CHECK(o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes,
               "--node-rank=", o.node_rank, " must be in [0, --nnodes=", o.nnodes, ")");
  STRATA_CHECK(o.max_restarts >= 0, "--max-restarts=", o.max_restarts,
               " must be 0 or more, e.g. --max-restarts 3");
  const bool auto_port = o.master_port == "auto" || o.master_port == "0";
  int64_t port = 0;
  if (auto_port) {
    STRATA_CHECK(o.nnodes == 1,
                 "--master-port auto works on one node only; with --nnodes=", o.nnodes,
                 " give every node the same --master-port P");
    port = probe_port(o.master_addr, 0);
  } else {
    try {
      size_t pos = 0;
      port = std::stoll(o.master_port, &pos);
      if (pos != o.master_port.size()) port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
    STRATA_CHECK(port > 0 && port < 65536, "--master-port=", o.master_port,
                 " is not a TCP port; give 1..65535 or auto");
    // Node 0 serves the store: say now, in one line, if the port is taken.
    if (o.node_rank == 0) probe_port(o.master_addr, port);
  }

  STRATA_CHECK(pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "pipe: ", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  for (int64_t attempt = 0;; ++attempt) {
    // A fresh port per start: the last one may still be held by a dying rank's store.
    if (attempt > 0 && auto_port) port = probe_port(o.master_addr, 0);
    const Attempt a = run_attempt(o, port, attempt);
    if (a.code == 0 || a.interrupted) return a.code;
    if (attempt >= o.max_restarts) {
      if (o.max_restarts > 0)
        std::fprintf(stderr, "strata launch: giving up after %lld restart(s); last failure: %s\n",
                     static_cast<long long>(o.max_restarts), a.cause.c_str());
      return a.code;
    }
    std::fprintf(stderr,
                 "strata launch: restart %lld of %lld after: %s; resuming from the latest "
                 "checkpoint\n",
                 static_cast<long long>(attempt + 1), static_cast<long long>(o.max_restarts),
                 a.cause.c_str());
  }
}

}  // namespace strata
