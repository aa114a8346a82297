// The read-bandwidth probe the benchmarks share: a parallel sum over a
// buffer with 64 independent accumulators per thread, so the adds never wait
// on each other and only memory limits it.
#ifndef FLOVER_BENCHMARKS_PARALLEL_SUM_H_
#define FLOVER_BENCHMARKS_PARALLEL_SUM_H_

#include <cstddef>

namespace flover {

// The sum of p[0, n) rounded down to a multiple of 64 elements, over the
// OpenMP threads (callers compile with -fopenmp).
inline float ParallelSum(const float* p, size_t n) {
  constexpr int kLanes = 64;
  const size_t whole = n / kLanes * kLanes;
  float total = 0;
#pragma omp parallel reduction(+ : total)
  {
    float acc[kLanes] = {};
#pragma omp for schedule(static)
    for (size_t i = 0; i < whole; i += kLanes) {
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) acc[j] += p[i + j];
    }
    for (float a : acc) total += a;
  }
  return total;
}

}  // namespace flover

#endif  // FLOVER_BENCHMARKS_PARALLEL_SUM_H_
