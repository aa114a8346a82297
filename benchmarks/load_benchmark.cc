// Peak memory and time to load a model and put this rank's part of it on
// the CPU backend, as a server does at start-up: LoadModel (config,
// tokenizer, checkpoint files) then Instantiate (this rank's weights on the
// backend). Prints one JSON line per rank.
//
//   tools/bazelw build //benchmarks:load_benchmark
//   python3 benchmarks/write_checkpoint.py --shape=llama-1b --dtype=bf16 --out=/tmp/llama1b
//   .bazel-root/bin/benchmarks/load_benchmark --model=/tmp/llama1b --dtype=bf16
//   mpirun --allow-run-as-root --oversubscribe -np 2
//       .bazel-root/bin/benchmarks/load_benchmark --model=/tmp/llama1b --dtype=bf16 --tp=2
//   (one command line)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "dist/communicator.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/causal_lm.h"
#include "model/model_loader.h"

ABSL_FLAG(std::string, model, "builtin:llama-tiny", "Model directory or builtin:NAME");
ABSL_FLAG(int, tp, 1, "Tensor-parallel ranks (> 1 under mpirun -np TP)");
ABSL_FLAG(std::string, dtype, "f32", "Linear layers' dtype on the backend: f32, bf16 or int8");

namespace flover {
namespace {

using Clock = std::chrono::steady_clock;

// Resident set now (VmRSS) and at its peak (VmHWM), in MiB.
std::pair<double, double> RssMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  double rss = 0, hwm = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stod(line.substr(6)) / 1024;
  }
  return {rss, hwm};
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "load_benchmark: %s\n", std::string(st.message()).c_str());
  return 1;
}

int Run() {
  const int tp = absl::GetFlag(FLAGS_tp);
  std::unique_ptr<Communicator> comm;
  if (tp > 1) {
    auto c = CreateMpiCommunicator(tp);
    if (!c.ok()) return Fail(c.status());
    comm = std::move(*c);
  } else {
    comm = std::make_unique<LocalCommunicator>();
  }
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  auto matmul = kernels::ParseMatmulDtype(dtype);
  if (!matmul.ok()) return Fail(matmul.status());
  auto backend = kernels::CpuBackend::Create(*matmul);
  if (!backend.ok()) return Fail(backend.status());
  const auto [rss0, hwm0] = RssMiB();
  const auto t0 = Clock::now();
  auto loaded = LoadModel(absl::GetFlag(FLAGS_model));
  if (!loaded.ok()) return Fail(loaded.status());
  const auto t1 = Clock::now();
  const auto [rss1, hwm1] = RssMiB();
  const std::string stored = (*loaded)->stored_dtype();
  auto model = (*loaded)->Instantiate(**backend, tp > 1 ? comm.get() : nullptr);
  if (!model.ok()) return Fail(model.status());
  const auto t2 = Clock::now();
  loaded->reset();  // what a server keeps is the model on the backend
  const auto [rss2, hwm2] = RssMiB();
  const double params = static_cast<double>(model->get()->info().num_parameters);
  std::printf(
      "{\"rank\": %d, \"tp\": %d, \"model\": \"%s\", \"stored\": \"%s\", \"dtype\": \"%s\", "
      "\"params_b\": %.3f, \"load_s\": %.2f, \"instantiate_s\": %.2f, "
      "\"rss_start_mib\": %.0f, \"rss_after_load_mib\": %.0f, \"rss_end_mib\": %.0f, "
      "\"peak_rss_mib\": %.0f}\n",
      comm->world().tp_rank, tp, absl::GetFlag(FLAGS_model).c_str(), stored.c_str(), dtype.c_str(),
      params / 1e9, std::chrono::duration<double>(t1 - t0).count(),
      std::chrono::duration<double>(t2 - t1).count(), rss0, rss1, rss2, hwm2);
  (void)hwm0, (void)hwm1;
  std::fflush(stdout);
  if (tp > 1) FinalizeMpi();
  return 0;
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return flover::Run();
}
