// attnlab public API: the processes of one job (docs/distributed.md). `mpirun -np N app ...` (or
// `srun --mpi=pmix`) starts N copies of a program; with a DistributedSession made first thing in
// main, they are ranks 0..N-1 and compare_grid_file() hands the grid's runs out among them (rank 0
// writes the summary). Started without a launcher, or built without MPI (ATTNLAB_MPI off), a
// program is one process, rank 0 of 1, and nothing changes.
// Thread-safety: one session per process, made and destroyed on the main thread.
#pragma once
#include "attnlab/error.h"

namespace attnlab {

// An error that every rank of a multi-process job stops with, with the same message on each (a bad
// grid file, a refused output directory, found before any rank trained): rank 0 reports it, the
// others need not repeat it.
class JobError : public Error {
 public:
  using Error::Error;
};

namespace api {

class DistributedSession {
 public:
  // Starts MPI when an MPI launcher started this process (never otherwise). Throws an Error when
  // a build without MPI was started as one of several processes.
  DistributedSession(int* argc, char*** argv);
  ~DistributedSession();  // ends MPI
  DistributedSession(const DistributedSession&) = delete;
  DistributedSession& operator=(const DistributedSession&) = delete;
  int rank() const;  // 0 .. size() − 1
  int size() const;  // the number of processes of the job (1 without a launcher)
  static bool built_with_mpi();
  // This process's rank: 0 without a session or a launcher (for code that has no session at hand).
  static int process_rank();
};

}  // namespace api
}  // namespace attnlab
