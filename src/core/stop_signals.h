// attnlab core: Ctrl-C / SIGTERM for long work (training, evaluations, analyses): the first signal
// asks the work to stop at its next safe point (stop_requested()); a second one ends the process
// with the default action, so that a stuck run can still be killed.
//
// No signal handler runs on a compute thread. With a handler (the first version), about one
// interrupted run in 50 died with heap corruption, always with the signal arriving while oneDNN was
// computing (docs/reliability.md, fault 13): a handler's frame is written on whatever stack the
// interrupted thread has at that instant. So while a StopSignals lives, SIGINT and SIGTERM are
// blocked in the calling thread and in every OpenMP worker (threads created later inherit the
// mask), and one thread of ours takes them with sigwaitinfo.
#pragma once
#include <signal.h>

#include <atomic>
#include <thread>

namespace attnlab {

class StopSignals {
 public:
  // Nested scopes (training inside a compare's evaluation phase, say) share the outermost one:
  // an inner StopSignals neither resets the flag nor starts a second waiter.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void block_in_workers(int how);
  void wait();
  bool outermost_ = false;
  sigset_t set_{}, old_mask_{};
  std::atomic<bool> stopping_{false};
  std::thread waiter_;
};

// The signal that asked to stop (SIGINT, SIGTERM), or 0; cleared when an outermost StopSignals starts.
int stop_signal();
inline bool stop_requested() { return stop_signal() != 0; }

}  // namespace attnlab
