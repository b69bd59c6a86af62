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

}  // namespace attnlab::distributed
