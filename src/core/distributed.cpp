// What both implementations of core/distributed.h share: reading the launcher's environment.
#include <cstdlib>

#include "core/distributed.h"

namespace attnlab::distributed {

int launcher_size() {
  // OpenMPI's mpirun, then PMIx (OpenMPI 4+, srun --mpi=pmix), then PMI-1/2 (MPICH's Hydra, srun --mpi=pmi2).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}) {
    const char* v = std::getenv(name);
    if (v && *v) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  // PMIx sets the rank, not always the size: a launcher started us, of unknown size (at least one).
  if (std::getenv("PMIX_RANK") || std::getenv("PMI_RANK")) return 1;
  return 0;
}

}  // namespace attnlab::distributed
