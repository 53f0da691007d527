#include "strata/core/stop_signal.h"

#include <signal.h>
#include <time.h>

#include <atomic>

namespace strata {

namespace {
std::atomic<int> g_stop{0};

std::atomic<int64_t> g_first_ms{0};

int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void on_stop_signal(int sig) {
  // A repeat a second or more later takes the default action: a user who presses
  // Ctrl-C twice means it. Repeats within that second are one request (the launcher
  // signals a rank's process group and the rank itself).
  const int64_t now = now_ms();
  if (g_stop.load() != 0 && now - g_first_ms.load() >= 1000) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  if (g_stop.load() == 0) {
    g_first_ms.store(now);
    g_stop.store(sig);
  }
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT}) sigaction(sig, &sa, nullptr);
}

int stop_requested() {
  return g_stop.load();
}

}  // namespace strata
