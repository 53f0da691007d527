#include "strata/distributed/heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "strata/core/env.h"

namespace strata::heartbeat {
namespace {

using Clock = std::chrono::steady_clock;

// Non-blocking: a full pipe (a launcher that stopped reading) drops the beat rather
// than stall training.
void write_line(int fd, const std::string& line) {
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());
}

struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread;
  bool running = false;
  int fd = -1;
  int64_t rank = 0;
  std::chrono::milliseconds timeout{0};
  // Written by the training thread, read by the beat thread (under mu).
  int64_t step = 0, progress = 0, seq = -1;
  bool waiting = false;
  std::string op = "-", axis = "-", group = "-";
  Clock::time_point since = Clock::now();

  ~State() { stop_thread(); }

  void stop_thread() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!running) return;
      running = false;
      write_line(fd, "stop " + std::to_string(rank) + "\n");
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }
};

State& state() {
  static State s;
  return s;
}

// One beat line of the state (under its lock).
std::string beat_line(const State& s) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - s.since).count();
  char buf[512];
  std::snprintf(buf, sizeof(buf), "hb %lld %lld %lld %lld %s %s %s %lld %lld %s\n",
                static_cast<long long>(s.rank), static_cast<long long>(s.step),
                static_cast<long long>(s.progress), static_cast<long long>(s.timeout.count()),
                s.waiting ? "wait" : "compute", s.op.c_str(), s.axis.c_str(),
                static_cast<long long>(s.seq), static_cast<long long>(ms), s.group.c_str());
  return buf;
}

void beat_loop() {
  State& s = state();
  const auto every = interval_for(s.timeout);
  std::unique_lock<std::mutex> lock(s.mu);
  while (s.running) {
    const std::string line = beat_line(s);
    const int fd = s.fd;
    lock.unlock();
    write_line(fd, line);
    lock.lock();
    s.cv.wait_for(lock, every, [&] { return !s.running; });
  }
}

}  // namespace

std::chrono::milliseconds interval_for(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

void start(int64_t rank, std::chrono::milliseconds timeout) {
  const auto fd = get_env_int("STRATA_HEARTBEAT_FD");
  if (!fd || *fd < 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.running) return;
  // The launched program's children must not keep the launcher's pipe open.
  fcntl(static_cast<int>(*fd), F_SETFD, FD_CLOEXEC);
  fcntl(static_cast<int>(*fd), F_SETFL, fcntl(static_cast<int>(*fd), F_GETFL) | O_NONBLOCK);
  s.fd = static_cast<int>(*fd);
  s.rank = rank;
  s.timeout = timeout;
  s.since = Clock::now();
  s.running = true;
  s.thread = std::thread(beat_loop);
}

void started(int64_t step) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.running) return;
  write_line(s.fd, "start " + std::to_string(s.rank) + " " + std::to_string(step) + "\n");
}

void set_step(int64_t step) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.step = step;
  ++s.progress;
  // A beat at every step as well: the flight record then names the step exactly.
  if (s.running) write_line(s.fd, beat_line(s));
}

void tick() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.progress;
}

void stop() {
  state().stop_thread();
}

Waiting::Waiting(const std::string& op, const std::string& axis, int64_t seq,
                 const std::string& group) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.waiting = true;
  s.op = op;
  s.axis = axis;
  s.seq = seq;
  s.group = group.empty() ? "-" : group;
  s.since = Clock::now();
  ++s.progress;
}

Waiting::~Waiting() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.waiting = false;
  s.since = Clock::now();
  ++s.progress;
}

}  // namespace strata::heartbeat
