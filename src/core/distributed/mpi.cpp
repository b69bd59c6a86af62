// core/distributed.h over MPI (ATTNLAB_MPI on): OpenMPI from Debian, or any MPI-3 library.
//
// The item queue's protocol: a rank other than 0 sends rank 0 a request (tag kRequest: one int, how
// its previous item ended) and waits for the answer (tag kAnswer: one int64, the item, or -1 for
// none left). Rank 0 answers from a thread of its own that polls with MPI_Iprobe and sleeps between
// polls: a blocking receive would spin one core at 100% (OpenMPI busy-waits), which rank 0's own
// training needs. MPI is initialized with MPI_THREAD_SERIALIZED: while that thread runs, it makes
// every MPI call of rank 0 (the queue is built after first_error() and destroyed before
// MPI_Finalize).
#include <mpi.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>
#include <mutex>
#include <thread>

#include "core/distributed.h"
#include "core/error.h"

namespace attnlab::distributed {

namespace {

int g_rank = 0;
int g_size = 1;
bool g_initialized_here = false;

constexpr int kRequest = 25001;
constexpr int kAnswer = 25002;

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace

bool built_with_mpi() { return true; }

Session::Session(int* argc, char*** argv) {
  if (launcher_size() == 0 || mpi_running()) return;
  int provided = 0;
  // The threads MPI starts (OpenMPI's event and PMIx threads) must not take SIGINT or SIGTERM:
  // the kernel hands a signal sent to the process to any thread that does not block it, and one
  // of theirs would die of it instead of letting core/stop_signals.h stop the work cleanly (a
  // SIGTERM from Slurm, or `kill` of one rank). They inherit the mask they start with.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  const int initialized = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (initialized != MPI_SUCCESS)
    fail("MPI: MPI_Init_thread failed (this process was started by an MPI launcher)");
  g_initialized_here = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (provided < MPI_THREAD_SERIALIZED && g_size > 1)
    fail("MPI: the MPI library gives thread level ", provided, ", attnlab needs MPI_THREAD_SERIALIZED (", int(MPI_THREAD_SERIALIZED),
         ") for rank 0's dispatcher thread; use an MPI built with thread support (Debian's OpenMPI has it)");
}

Session::~Session() {
  if (g_initialized_here && mpi_running()) MPI_Finalize();
  g_initialized_here = false;
  g_rank = 0;
  g_size = 1;
}

int rank() { return g_rank; }
int size() { return g_size; }

std::string first_error(const std::string& mine) {
  if (g_size == 1) return mine;
  int failing = mine.empty() ? g_size : g_rank;
  MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (failing == g_size) return "";
  std::string message = failing == g_rank ? mine : std::string();
  int length = (int)message.size();
  MPI_Bcast(&length, 1, MPI_INT, failing, MPI_COMM_WORLD);
  message.resize((size_t)length);
  MPI_Bcast(message.data(), length, MPI_CHAR, failing, MPI_COMM_WORLD);
  return failing == 0 ? message : "rank " + std::to_string(failing) + ": " + message;
}

struct ItemQueue::State {
  std::vector<size_t> items;
  std::mutex mutex;         // rank 0: items, next, stopped, worst between its thread and its worker
  size_t next = 0;
  bool stopped = false;     // an item stopped or failed: hand out nothing more
  ItemEnd worst = ItemEnd::none;
  std::thread dispatcher;   // rank 0 with other ranks
  bool exhausted = false;   // other ranks: rank 0 said no item is left

  void record(ItemEnd end) {
    worst = std::max(worst, end);
    if (end == ItemEnd::stopped || end == ItemEnd::failed) stopped = true;
  }
  // Rank 0: the next item to hand out, or -1.
  int64_t take(ItemEnd previous) {
    std::lock_guard<std::mutex> lock(mutex);
    record(previous);
    if (stopped || next >= items.size()) return -1;
    return (int64_t)items[next++];
  }
  // Rank 0's thread: answers every other rank until each has been told that nothing is left.
  void serve() {
    int finished = 0;
    while (finished < g_size - 1) {
      int waiting = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kRequest, MPI_COMM_WORLD, &waiting, &status);
      if (!waiting) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      int previous = 0;
      MPI_Recv(&previous, 1, MPI_INT, status.MPI_SOURCE, kRequest, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      int64_t item = take(static_cast<ItemEnd>(std::clamp(previous, 0, int(ItemEnd::failed))));
      MPI_Send(&item, 1, MPI_INT64_T, status.MPI_SOURCE, kAnswer, MPI_COMM_WORLD);
      if (item < 0) ++finished;
    }
  }
};

ItemQueue::ItemQueue(std::vector<size_t> items) : state_(new State) {
  state_->items = std::move(items);
  if (g_rank == 0 && g_size > 1) state_->dispatcher = std::thread([s = state_] { s->serve(); });
}

ItemQueue::~ItemQueue() {
  if (state_->dispatcher.joinable()) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stopped = true;
    }
    state_->dispatcher.join();
  }
  delete state_;
}

std::optional<size_t> ItemQueue::next(ItemEnd previous) {
  if (g_rank == 0) {
    const int64_t item = state_->take(previous);
    if (item < 0) return std::nullopt;
    return (size_t)item;
  }
  state_->record(previous);
  if (state_->exhausted) return std::nullopt;
  int end = int(previous);
  MPI_Send(&end, 1, MPI_INT, 0, kRequest, MPI_COMM_WORLD);
  int64_t item = -1;
  MPI_Recv(&item, 1, MPI_INT64_T, 0, kAnswer, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (item < 0) {
    state_->exhausted = true;
    return std::nullopt;
  }
  return (size_t)item;
}

ItemEnd ItemQueue::finish() {
  if (state_->dispatcher.joinable()) state_->dispatcher.join();
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->worst;
}

// ---- Collectives: data-parallel training ----
//
// OpenMPI moves a non-blocking collective on only inside MPI calls. The training thread makes a
// few (between sublayers), but a sublayer's backward takes milliseconds, and a bucket's sum needs
// several rounds of messages: a progress thread tests the pending requests every 100 µs while there
// are any, and sleeps on a condition variable while there are none. MPI_THREAD_SERIALIZED: the
// training thread and the progress thread make their MPI calls under one mutex.

struct Collectives::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> pending;  // capacity fixed at construction: starting one never allocates
  double timeout_s = 0;
  std::mutex mutex;                  // every MPI call on comm, and pending
  std::condition_variable wake;      // the progress thread: requests are pending, or stop
  bool stop = false;
  std::thread progress;
};

// Prints the failure and ends the job: MPI_Abort makes the launcher stop every process (a throw
// would leave requests in flight, and MPI_Finalize would wait for them forever).
void abort_job(const std::string& message) {
  if (g_size == 1) fail(message);
  std::fprintf(stderr, "attnlab: error: rank %d of %d: %s\n", g_rank, g_size, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; should it, nothing may continue
}

namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, (size_t)std::max(length, 0));
}

void check_call(int code, const char* call, const char* what) {
  if (code != MPI_SUCCESS)
    abort_job(std::string(call) + " failed while " + what + " (" + mpi_error_text(code) +
              "): another rank has probably died; the job stops (the last complete checkpoint in train.out_dir loads)");
}

// Polls the pending requests until all are complete, the deadline passes (a rank died or hangs)
// or MPI reports an error. Polling, not MPI_Waitall: a wait could not have a deadline.
double wait_for(Collectives::State& s, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (s.pending.empty()) return 0;
      check_call(MPI_Testall((int)s.pending.size(), s.pending.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall", what);
      if (done) s.pending.clear();
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done) return waited;
    if (waited > s.timeout_s) {
      // A collective cannot tell which rank is missing; with two ranks it is the other one.
      char others[64];
      if (g_size == 2) std::snprintf(others, sizeof others, "rank %d", 1 - g_rank);
      else std::snprintf(others, sizeof others, "the other %d ranks", g_size - 1);
      char text[512];
      std::snprintf(text, sizeof text,
                    "no answer from %s for %.0f s while %s (train.dp_timeout): a rank has died or hangs; "
                    "the job stops (the last complete checkpoint in train.out_dir loads)",
                    others, s.timeout_s, what);
      abort_job(text);
    }
    std::this_thread::yield();
  }
}

// Starts one operation (under the mutex) and wakes the progress thread.
template <class Start>
void start_pending(Collectives::State& s, const char* call, const char* what, Start&& start) {
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    ATTNLAB_CHECK(s.pending.size() < s.pending.capacity());
    MPI_Request request;
    check_call(start(&request), call, what);
    s.pending.push_back(request);
  }
  s.wake.notify_one();
}

void progress_loop(Collectives::State& s) {
  // Signals are for the training thread's stop handling (core/stop_signals.h), never for this one.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.wake.wait(lock, [&] { return s.stop || !s.pending.empty(); });
    if (s.stop) return;
    int done = 0;
    // An error here is the training thread's to report: its next test of the same requests fails.
    MPI_Testall((int)s.pending.size(), s.pending.data(), &done, MPI_STATUSES_IGNORE);
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lock.lock();
  }
}

}  // namespace

Collectives::Collectives(int max_pending, double timeout_s) : state_(new State) {
  state_->pending.reserve((size_t)std::max(max_pending, 1));
  state_->timeout_s = timeout_s;
  if (g_size == 1) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm);
  MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN);
  state_->progress = std::thread([s = state_] { progress_loop(*s); });
}

Collectives::~Collectives() {
  if (state_->progress.joinable()) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stop = true;
    }
    state_->wake.notify_one();
    state_->progress.join();
  }
  if (state_->comm != MPI_COMM_NULL && mpi_running()) {
    wait_for(*state_, "finishing the last reductions");
    MPI_Comm_free(&state_->comm);
  }
  delete state_;
}

void Collectives::start_sum(float* data, size_t n) {
  if (g_size == 1 || n == 0) return;
  ATTNLAB_CHECK(n <= (size_t)std::numeric_limits<int>::max());
  start_pending(*state_, "MPI_Iallreduce", "starting a gradient reduction", [&](MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, MPI_FLOAT, MPI_SUM, state_->comm, r);
  });
}

void Collectives::start_sum_scatter(const float* data, float* mine, const int* counts) {
  if (g_size == 1) {
    if (mine != data) std::copy(data, data + counts[0], mine);
    return;
  }
  start_pending(*state_, "MPI_Ireduce_scatter", "starting a gradient reduce-scatter", [&](MPI_Request* r) {
    return MPI_Ireduce_scatter(data, mine, counts, MPI_FLOAT, MPI_SUM, state_->comm, r);
  });
}

void Collectives::progress() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->pending.empty()) return;
  int done = 0;
  check_call(MPI_Testall((int)state_->pending.size(), state_->pending.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall",
             "reducing gradients");
}

double Collectives::wait_all(const char* what) { return wait_for(*state_, what); }

void Collectives::abort_job(const std::string& message) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  distributed::abort_job(message);
}

void Collectives::sum(double* values, int n, const char* what) {
  if (g_size == 1) return;
  start_pending(*state_, "MPI_Iallreduce", what,
                [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, state_->comm, r); });
  wait_for(*state_, what);
}

void Collectives::sum(uint64_t* values, int n, const char* what) {
  if (g_size == 1) return;
  start_pending(*state_, "MPI_Iallreduce", what,
                [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_UINT64_T, MPI_SUM, state_->comm, r); });
  wait_for(*state_, what);
}

void Collectives::gather_all(float* data, const int* counts, const int* displacements, const char* what) {
  if (g_size == 1) return;
  start_pending(*state_, "MPI_Iallgatherv", what, [&](MPI_Request* r) {
    return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts, displacements, MPI_FLOAT, state_->comm, r);
  });
  wait_for(*state_, what);
}

void Collectives::gather_to_root(const float* mine, float* all, const int* counts, const int* displacements, const char* what) {
  if (g_size == 1) {
    std::copy(mine, mine + counts[0], all + displacements[0]);
    return;
  }
  start_pending(*state_, "MPI_Igatherv", what, [&](MPI_Request* r) {
    return MPI_Igatherv(mine, counts[g_rank], MPI_FLOAT, all, counts, displacements, MPI_FLOAT, 0, state_->comm, r);
  });
  wait_for(*state_, what);
}

}  // namespace attnlab::distributed
