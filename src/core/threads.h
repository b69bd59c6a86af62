#pragma once
#include <omp.h>

namespace attnlab {
// Threads OpenMP (and therefore oneDNN, built on the same runtime) will use: OMP_NUM_THREADS or all cores.
inline int omp_threads() { return omp_get_max_threads(); }
}  // namespace attnlab
