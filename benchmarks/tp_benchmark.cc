// Decode step time on builtin:gpt2-small with and without tensor
// parallelism, and how much of the step is communication.
//
//   tools/bazelw build //benchmarks:tp_benchmark
//   .bazel-root/bin/benchmarks/tp_benchmark --tp=1 --threads=2
//   mpirun --allow-run-as-root --oversubscribe -np 2 .bazel-root/bin/benchmarks/tp_benchmark
//       --tp=2 --threads=1
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "dist/communicator.h"
#include "model/causal_lm.h"
#include "model/model_loader.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_threads.h"

ABSL_FLAG(int, tp, 1, "Tensor-parallel ranks (> 1 under mpirun -np TP)");
ABSL_FLAG(int, threads, 2, "OpenMP threads per rank");
ABSL_FLAG(int, repeats, 5, "Timed repetitions (median)");
ABSL_FLAG(int, steps, 16, "Decode steps per repetition");

namespace flover {
namespace {

using Clock = std::chrono::steady_clock;

// Times every collective (the all-reduces after row-split layers, the
// embedding's, and the LM head gather).
class TimingCommunicator final : public Communicator {
 public:
  explicit TimingCommunicator(Communicator& inner) : inner_(inner) {}
  const WorldConfig& world() const override { return inner_.world(); }
  absl::Status AllReduceSum(const kernels::Tensor& data) override {
    return Timed([&] { return inner_.AllReduceSum(data); });
  }
  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    return Timed([&] { return inner_.Broadcast(data, bytes, root); });
  }
  void Abort(int code) override { inner_.Abort(code); }
  absl::Status GatherToLeader(const kernels::Tensor& local, std::vector<float>* out) override {
    return Timed([&] { return inner_.GatherToLeader(local, out); });
  }
  double seconds = 0;

 private:
  absl::Status Timed(const std::function<absl::Status()>& f) {
    const auto start = Clock::now();
    absl::Status st = f();
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    return st;
  }
  Communicator& inner_;
};

int Run() {
  const int tp = absl::GetFlag(FLAGS_tp);
  std::unique_ptr<Communicator> base;
  if (tp > 1) {
    auto c = CreateMpiCommunicator(tp);
    if (!c.ok()) {
      std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
      return 1;
    }
    base = std::move(*c);
  } else {
    base = std::make_unique<LocalCommunicator>();
  }
  TimingCommunicator comm(*base);
  const bool leader = comm.world().is_leader();
  kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  auto loaded = LoadModel("builtin:gpt2-small");
  if (!loaded.ok()) return 1;
  const ModelInfo& cfg = (*loaded)->info();
  auto backend = kernels::CpuBackend::Create();
  if (!backend.ok()) return 1;
  auto created = (*loaded)->Instantiate(**backend, &comm);  // this rank's shard
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  CausalLm& model = **created;
  // As the engine does at start: the largest step here is a 128-token prompt.
  if (absl::Status st = model.PrepareForBatches(128, 32); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  const int repeats = absl::GetFlag(FLAGS_repeats), steps = absl::GetFlag(FLAGS_steps);
  const int context = 128;
  if (leader) {
    std::printf("builtin:gpt2-small, tp=%d, %d threads per rank\n\n", tp, kernels::CpuThreads());
    std::printf("| batch | ms per step | tokens/s | communication ms per step |\n|---:|---:|---:|---:|\n");
  }
  for (int batch : {1, 32}) {
    const int max_seq = context + steps + 2;
    auto cache = KvCache::Create(**backend, model.CacheShape(batch * KvCacheShape::BlocksFor(max_seq), max_seq));
    if (!cache.ok()) return 1;
    auto blocks = [&](int s) { return InterleavedBlocks(s, batch, max_seq); };
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t> prompt(context);
      for (int i = 0; i < context; ++i) prompt[i] = (i * 7919 + s * 104729) % cfg.vocab_size;
      ForwardBatch b;
      b.AddSequence(blocks(s), 0, prompt);
      if (!model.Forward(b, **cache, LogitsFor::kLastRowsOfEachSequence).ok()) return 1;
    }
    std::vector<double> step_s, comm_s;
    for (int r = 0; r < repeats + 1; ++r) {
      comm.seconds = 0;
      const auto start = Clock::now();
      for (int i = 0; i < steps; ++i) {
        ForwardBatch b;
        const int pos = context - steps / 2 + i;
        for (int s = 0; s < batch; ++s) b.AddSequence(blocks(s), pos, {(pos * 31 + s) % cfg.vocab_size});
        if (!model.Forward(b, **cache, LogitsFor::kLastRowsOfEachSequence).ok()) return 1;
      }
      if (r == 0) continue;  // warm-up
      step_s.push_back(std::chrono::duration<double>(Clock::now() - start).count() / steps);
      comm_s.push_back(comm.seconds / steps);
    }
    std::sort(step_s.begin(), step_s.end());
    std::sort(comm_s.begin(), comm_s.end());
    const double step = step_s[step_s.size() / 2], c = comm_s[comm_s.size() / 2];
    if (leader) std::printf("| %d | %.2f | %.0f | %.2f |\n", batch, step * 1e3, batch / step, c * 1e3);
  }
  if (tp > 1) FinalizeMpi();
  return 0;
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return flover::Run();
}
