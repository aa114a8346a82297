// The read-bandwidth probe the benchmarks share: a parallel sum over a
// buffer with 64 independent accumulators per thread, so the adds never wait
// on each other and only memory limits it.
#ifndef FLOVER_BENCHMARKS_PARALLEL_SUM_H_
#define FLOVER_BENCHMARKS_PARALLEL_SUM_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

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

// Read bandwidth in GB/s: the median of `repeats` parallel sums (after an
// untimed one) over a buffer far larger than the caches (1 GiB of floats).
inline double ReadBandwidthGBs(int repeats) {
  const size_t n = size_t(1) << 28;
  std::vector<float> buf(n, 1.0f);
  volatile float sink = ParallelSum(buf.data(), n);
  std::vector<double> seconds;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const auto start = std::chrono::steady_clock::now();
    sink = ParallelSum(buf.data(), n);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  (void)sink;
  std::sort(seconds.begin(), seconds.end());
  return n * sizeof(float) / seconds[seconds.size() / 2] / 1e9;
}

}  // namespace flover

#endif  // FLOVER_BENCHMARKS_PARALLEL_SUM_H_
