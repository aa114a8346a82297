// The CPU backend's thread count (--threads), applied to each thread that
// runs parallel work, and let go where a thread's work moves elsewhere.
#ifndef FLOVER_KERNELS_CPU_CPU_THREADS_H_
#define FLOVER_KERNELS_CPU_CPU_THREADS_H_

namespace flover::kernels {

// How many threads Flover's CPU work uses: oneDNN's matmuls, the CPU
// kernels' loops and the engine's sampling, all through one OpenMP pool.
//
// OpenMP keeps these settings per thread: omp_set_num_threads on the main
// thread does not reach the engine's thread, which started with OpenMP's
// default (every core). So the count is kept here for the whole process and
// every entry that runs parallel work applies it on the thread that runs it.
// (Found: a server started with --threads=1 ran its steps on two threads, and
// two servers on two cores spun four.)

// Sets the count for every thread of the process from now on, and applies
// it to the caller (0: each thread keeps its own, at first OMP_NUM_THREADS
// or the cores).
void SetCpuThreads(int threads);

// Applies the process's count to the calling thread's OpenMP settings, and
// keeps its teams whole: no dynamic adjustment, never above OMP_THREAD_LIMIT
// (oneDNN splits a matmul's work for omp_get_max_threads() threads when it
// makes a primitive and runs it in one parallel region; a team that got
// fewer threads left parts of the output unwritten, found with
// OMP_THREAD_LIMIT=1). Called first by every entry point that makes or runs
// a primitive or opens a parallel region (a few nanoseconds).
void UseCpuThreadsHere();

// The calling thread runs no more parallel work for now (its work moved to
// another thread): its idle OpenMP workers are let go. libgomp spins at a
// barrier only while it manages no more threads than there are cores;
// beyond, every barrier sleeps and wakes through the kernel. (Found: the
// server's main thread kept the workers of its loading and warm-up, and the
// engine thread's steps at batch 1 took 9 ms instead of 2.5.) A later
// parallel region on this thread starts workers again.
void ReleaseCpuThreadsHere();

// The team size the calling thread's parallel work gets (after applying).
int CpuThreads();

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_CPU_THREADS_H_
