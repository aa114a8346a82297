#include "kernels/cpu/cpu_threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

namespace flover::kernels {
namespace {

std::atomic<int> g_threads{0};  // 0: each thread keeps OpenMP's default

}  // namespace

void SetCpuThreads(int threads) {
  g_threads.store(std::max(threads, 0), std::memory_order_relaxed);
  UseCpuThreadsHere();
}

void UseCpuThreadsHere() {
  if (omp_get_dynamic()) omp_set_dynamic(0);
  const int asked = g_threads.load(std::memory_order_relaxed);
  const int want = std::min(asked > 0 ? asked : omp_get_max_threads(), omp_get_thread_limit());
  if (omp_get_max_threads() != want) omp_set_num_threads(want);
}

void ReleaseCpuThreadsHere() {
  // OpenMP 5's pause ends the calling thread's pool in libgomp (a team of
  // one would not: it never touches the pool).
  (void)omp_pause_resource_all(omp_pause_soft);
}

int CpuThreads() {
  UseCpuThreadsHere();
  return omp_get_max_threads();
}

}  // namespace flover::kernels
