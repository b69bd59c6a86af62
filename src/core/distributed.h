// attnlab core: the processes of one job (docs/distributed.md). Started by an MPI launcher
// (`mpirun -np N attnlab ...`, `srun --mpi=pmix`), the N processes are ranks 0..N-1 of one
// communicator; started any other way, attnlab is one process, rank 0 of 1.
//
// Everything attnlab does across processes goes through this header, and only through it: the
// build compiles distributed/mpi.cpp when ATTNLAB_MPI is on (OpenMPI found) and
// distributed/single_process.cpp otherwise, so no other file has an #ifdef for MPI, and a build
// without MPI behaves exactly like one with it started without a launcher.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::distributed {

// Whether this binary was built with MPI (ATTNLAB_MPI).
bool built_with_mpi();
// The number of processes an MPI launcher says it started (its environment: OMPI_COMM_WORLD_SIZE,
// PMIX/PMI sizes); 0 when no launcher started this process.
int launcher_size();

// Starts MPI when an MPI launcher started this process (and not otherwise: a plain `attnlab` never
// touches the network); ends it when destroyed. One per process, made before any other call here
// (the CLI's main holds it). A binary built without MPI that a launcher started as one of several
// processes is an error naming the build option, since its copies could not coordinate and would
// all write the same files.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

// This process's rank and the number of processes (0 and 1 without a Session or a launcher).
int rank();
int size();

// Collective: the error of the lowest rank that has one ("" on every rank when none has one),
// prefixed "rank K: " when K is not 0. A rank that finds an error before any work starts (a bad
// grid, a refused directory) says so here, before any rank writes anything, so the job stops as a
// whole instead of leaving the others waiting for it, and every rank stops with the same message.
std::string first_error(const std::string& mine);

// Ends the whole job now: this rank prints "attnlab: error: rank R of N: <message>" and MPI_Abort
// makes the launcher stop every process. For an error on one rank while the others wait for it in
// a collective (data-parallel training), where a normal exit would leave them waiting. With one
// process: throws the message as an Error.
[[noreturn]] void abort_job(const std::string& message);

// How a rank's previous item ended, reported with its next request.
enum class ItemEnd { none, done, stopped, failed };

// The dynamic hand-out of work items (the cells of a compare grid) across the job: every rank
// constructs it with the same items, in the same order; each asks for its next item when it has
// finished the previous one, so a rank that finishes early takes the next. Rank 0 hands the items
// out from a thread of its own (polling every few milliseconds, so it costs no core) and works
// items itself in between: with N ranks, N processes train. After an item that stopped or failed
// no further item is handed to anyone; the ranks finish the items they hold.
// Without MPI or with one rank: the items in order, in this process.
class ItemQueue {
 public:
  explicit ItemQueue(std::vector<size_t> items);
  ~ItemQueue();  // rank 0: stops handing out and waits for the other ranks to finish theirs
  ItemQueue(const ItemQueue&) = delete;
  ItemQueue& operator=(const ItemQueue&) = delete;
  // The next item for this rank, reporting how the previous one ended; nullopt when no item is
  // left (or the queue was stopped).
  std::optional<size_t> next(ItemEnd previous);
  // Rank 0, once its own next() returned nullopt: waits until every other rank has finished its
  // items and returns the worst ending reported by any rank (none < done < stopped < failed).
  // Other ranks: returns their own worst ending at once.
  ItemEnd finish();

 private:
  struct State;
  State* state_;
};

// ---- Data-parallel training (train/data_parallel.h) ----
// The collectives one training job needs, on a communicator of its own (a duplicate of the job's,
// so its messages never meet the item queue's). Every call is collective: all ranks make the same
// calls in the same order. Every wait has a deadline and every MPI error is caught (the
// communicator returns errors instead of aborting): a rank that dies or hangs stops the whole job
// within `timeout_s` with a message naming this rank and what it waited for (then MPI_Abort, which
// makes the launcher end every process; an exception would leave requests in flight and
// MPI_Finalize waiting for them). Without MPI or with one rank: the sums are no-ops and the
// gathers copies. Nothing here allocates after construction (the request table is sized there).
class Collectives {
 public:
  Collectives(int max_pending, double timeout_s);
  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  // Non-blocking, started in the same order on every rank; at most max_pending in flight.
  // start_sum: data (n) := the sum of every rank's data (n), in place.
  void start_sum(float* data, size_t n);
  // start_sum_scatter: the sum over ranks of data (Σ counts), of which rank r receives the counts[r]
  // elements after Σ_{k<r} counts[k] into its `mine` (a reduce-scatter).
  void start_sum_scatter(const float* data, float* mine, const int* counts);
  // Gives MPI a chance to move the pending operations on (OpenMPI progresses only inside its calls).
  void progress();
  // Waits for every pending operation; returns the seconds spent waiting. `what` names them in
  // the message of a failure.
  double wait_all(const char* what);

  // Blocking, each bounded like wait_all.
  void sum(double* values, int n, const char* what);                 // values (n) := the sum over ranks
  void sum(uint64_t* values, int n, const char* what);
  // data: every rank's counts[r] elements at displacements[r], filled in from rank r on all ranks.
  void gather_all(float* data, const int* counts, const int* displacements, const char* what);
  // Rank 0's `all` gets every rank's `mine` (counts[r] elements at displacements[r]); other ranks' `all` is unused.
  void gather_to_root(const float* mine, float* all, const int* counts, const int* displacements, const char* what);
  // distributed::abort_job with the progress thread held off (MPI_THREAD_SERIALIZED: no MPI call
  // may run beside MPI_Abort).
  [[noreturn]] void abort_job(const std::string& message);

  struct State;  // the implementation's (its helper functions take it)

 private:
  State* state_;
};

}  // namespace attnlab::distributed
