// Async-signal-safe recording of termination signals (an atomic the supervisor polls).
#include "launcher/signals.h"

#include <atomic>
#include <csignal>

namespace rtd::launcher {
namespace {

std::atomic<int> g_pending{0};

void on_signal(int sig) { g_pending.store(sig); }

}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int take_pending_signal() { return g_pending.exchange(0); }

}  // namespace rtd::launcher
