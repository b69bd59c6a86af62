#include "core/stop_signals.h"

#include <omp.h>
#include <pthread.h>

namespace attnlab {

namespace {
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_depth{0};  // live StopSignals scopes
}  // namespace

int stop_signal() { return g_stop_signal.load(); }

StopSignals::StopSignals() {
  outermost_ = g_depth.fetch_add(1) == 0;
  if (!outermost_) return;
  g_stop_signal = 0;
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, &old_mask_);
  block_in_workers(SIG_BLOCK);
  waiter_ = std::thread([this] { wait(); });
}

StopSignals::~StopSignals() {
  g_depth.fetch_sub(1);
  if (!outermost_) return;
  stopping_.store(true);
  pthread_kill(waiter_.native_handle(), SIGINT);  // wakes the waiter, which sees stopping_ and returns
  waiter_.join();
  block_in_workers(SIG_UNBLOCK);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void StopSignals::block_in_workers(int how) {
  const sigset_t* set = &set_;
#pragma omp parallel
  if (omp_get_thread_num() != 0) pthread_sigmask(how, set, nullptr);
}

void StopSignals::wait() {
  for (;;) {
    siginfo_t info;
    const int sig = sigwaitinfo(&set_, &info);
    if (stopping_.load()) return;
    if (sig < 0) continue;  // EINTR
    if (!g_stop_signal) {
      g_stop_signal = sig;  // the work checks it at its next safe point
      continue;
    }
    // The second signal: the default action (termination), as if no one had caught it.
    signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &set_, nullptr);
    raise(sig);
  }
}

}  // namespace attnlab
