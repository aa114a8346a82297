// A thread whose parallel work moved elsewhere lets its OpenMP workers go:
// they end, so they no longer count against the cores (see cpu_threads.h).
#include "kernels/cpu/cpu_threads.h"

#include <omp.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace flover::kernels {
namespace {

int ProcessThreads() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

TEST(CpuThreadsTest, ReleaseEndsTheCallersIdleWorkers) {
  SetCpuThreads(3);
  std::atomic<int> ran{0};
#pragma omp parallel
  ran.fetch_add(1);
  ASSERT_EQ(ran.load(), 3);
  const int with_pool = ProcessThreads();  // this thread and its two workers, at least
  ReleaseCpuThreadsHere();
  // The workers end on their own schedule: poll for it (bounded).
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (ProcessThreads() > with_pool - 2 && absl::Now() < until) std::this_thread::yield();
  EXPECT_EQ(ProcessThreads(), with_pool - 2);
  // Parallel work here afterwards starts workers again.
  ran = 0;
#pragma omp parallel
  ran.fetch_add(1);
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace flover::kernels
