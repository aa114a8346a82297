// Forward-pass throughput of a model (--model, default builtin:gpt2-small)
// on a backend (--device),
// beside that device's roofline measured in the same run: on the CPU oneDNN
// sgemm GFLOP/s at the model's GEMM shapes and memory read bandwidth; on a
// GPU the vendor library's GEMM TFLOP/s at the same shapes (and our own,
// batch-invariant Linear's), and device-to-device copy bandwidth.
//
//   tools/bazelw run -c opt //benchmarks:model_benchmark -- [--threads=2] [--repeats=5]
//   .../model_benchmark --device=cuda --dtype=bf16 --kv_dtype=bf16 --decode_batches=1,8,32,256
//
// Prints a Markdown table (docs/performance.md's tables are copies of it).
#include <filesystem>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_format.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "benchmarks/parallel_sum.h"
#include "benchmarks/profiling_backend.h"
#include "model/causal_lm.h"
#include "kernels/ggml_dequant.h"
#include "model/loader/gguf.h"
#include "model/loader/random_blocks.h"
#include "model/model_loader.h"
#include "kernels/backend_factory.h"
#include "kernels/backend_flags.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_threads.h"
#include "oneapi/dnnl/dnnl.h"

ABSL_FLAG(int, threads, 2, "OpenMP threads (oneDNN and kernels)");
ABSL_FLAG(int, repeats, 5, "Timed repetitions per figure; the median is reported");
ABSL_FLAG(int, decode_steps, 16, "Decode steps per timed repetition");
ABSL_FLAG(bool, profile, false, "Also print the time per op of each workload");
ABSL_FLAG(bool, greedy_on_device, false,
          "Decode rows take each row's best token where the logits are (ForwardGreedy, as the "
          "engine does for greedy steps) instead of bringing the logits back");
ABSL_FLAG(std::string, model, "builtin:gpt2-small", "Model directory or builtin:NAME");
ABSL_FLAG(std::string, prefill_lengths, "128,512", "Prompt lengths of the prefill rows");
ABSL_FLAG(std::string, decode_batches, "1,8,32,64", "Batch sizes of the decode rows");
ABSL_FLAG(int, decode_context, 128,
          "Positions of context each decoding sequence has. Past 128 the cache is filled by writing "
          "a pattern into every block (cpu only) instead of a prefill: a step reads the same bytes, "
          "and 32 prefills of 16K positions would take longer than the measurement");
ABSL_FLAG(std::string, random_blocks, "",
          "A GGUF block format (Q4_K, Q8_0, ...): a built-in Llama-family model's linear layers "
          "are random rows of blocks in it, for --dtype=native without a GGUF file");

namespace flover {
namespace {

using Clock = std::chrono::steady_clock;

// Median wall time in seconds of `repeats` runs of fn (after one warm-up).
double MedianSeconds(int repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double SgemmGflops(int M, int N, int K, int repeats) {
  std::vector<float> a(size_t(M) * K, 0.01f), b(size_t(K) * N, 0.02f), c(size_t(M) * N);
  const int inner = std::max(1, 256 / M);  // keep each timing well above timer noise
  const double s = MedianSeconds(repeats, [&] {
    for (int i = 0; i < inner; ++i) {
      dnnl_sgemm('N', 'N', M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    }
  });
  return 2.0 * M * N * K * inner / s / 1e9;
}

// TFLOP/s of the backend's own Linear at [M,K]x[K,N] (what the model runs),
// timing `inner` calls per repetition. f32 inputs are 0.01 (int8 quantizes
// them per call, so they should not all be zero); a 16-bit input's bits are
// zeros (the timing ignores values).
double LinearTflops(kernels::Backend& backend, int M, int N, int K, int repeats, int inner) {
  std::vector<float> w(size_t(K) * N, 0.02f), x(size_t(M) * K, 0.01f);
  auto weight = backend.PrepareWeight(w.data(), K, N, kernels::WeightLayout::kInOut);
  auto in = backend.Allocate(backend.activation_dtype(), M, K);
  auto out = backend.Allocate(kernels::DType::kF32, M, N);
  if (!weight.ok() || !in.ok() || !out.ok()) return 0;
  if (backend.activation_dtype() == kernels::DType::kF32) {
    (void)backend.Upload(x.data(), *in);
  } else {
    const std::vector<uint16_t> zeros(size_t(M) * K, 0);
    (void)backend.Upload(zeros.data(), *in);
  }
  const double s = MedianSeconds(repeats, [&] {
    for (int i = 0; i < inner; ++i) (void)backend.Linear(*in, **weight, nullptr, kernels::Epilogue::kBias, *out);
    (void)backend.Synchronize();
  });
  return 2.0 * M * N * K * inner / s / 1e12;
}

// GFLOP/s (GOP/s for int8) of the CPU backend's own Linear in `dtype` (packed
// bf16 weights, or int8 with the inputs quantized per call) at [M,K]x[K,N].
double CpuLinearGflops(kernels::MatmulDtype dtype, int M, int N, int K, int repeats) {
  auto backend = kernels::CpuBackend::Create(dtype);
  if (!backend.ok()) return 0;
  // Enough calls per timing to stay well above timer noise.
  return 1e3 * LinearTflops(**backend, M, N, K, repeats, std::max(1, 256 / M));
}

std::vector<int32_t> Tokens(int n, int vocab, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7919 + seed * 104729) % vocab;
  return t;
}

// Share of each op in one run of `fn` through a ProfilingBackend, after an
// untimed one (the first run over a fresh cache touches its pages).
void PrintProfile(const char* workload, ProfilingBackend& prof, const std::function<void()>& fn) {
  fn();
  prof.Reset();
  const auto start = Clock::now();
  fn();
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("  profile %s (%.1f ms):", workload, total * 1e3);
  for (const auto& [op, sec] : prof.seconds()) std::printf(" %s %.0f%%", op.c_str(), 100 * sec / total);
  std::printf("\n");
}

std::vector<int> IntList(const std::string& flag) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    int v = 0;
    if (absl::SimpleAtoi(part, &v) && v > 0) out.push_back(v);
  }
  return out;
}

// The CPU's roofline: oneDNN sgemm (and our bf16 or int8 linear) and read bandwidth.
// `stored_bytes`: with --dtype=native, the GGUF file's size (or a built-in's
// parameters in its --random_blocks format), which bounds the bytes a step
// streams (its matrices as run — Q3_K's as Q6_K — plus the embedding, which
// is not streamed); times the share of the parameters a token passes
// through (a mixture of experts reads only its chosen experts).
void PrintCpuRoofline(const ModelInfo& cfg, kernels::MatmulDtype dtype, int repeats,
                      double flop_per_token, double stored_bytes) {
  // The QKV GEMM's shape: [M, C] x [C, 3C].
  const int K = cfg.hidden, N = 3 * cfg.hidden;
  std::printf("\nRoofline, same run:\n\n| sgemm [M,%d]x[%d,%d] | GFLOP/s |\n|---|---:|\n", K, K, N);
  for (int M : {1, 8, 32, 64, 128, 512}) {
    std::printf("| M=%d | %.0f |\n", M, SgemmGflops(M, N, K, repeats));
  }
  const bool f32 = dtype == kernels::MatmulDtype::kF32;
  const char* name = kernels::MatmulDtypeName(dtype);
  if (dtype == kernels::MatmulDtype::kNative) {
    // The linear probes use random float matrices, which native runs in f32:
    // only the bandwidth bound means something here.
    const double bw = ReadBandwidthGBs(repeats);
    const double share = cfg.num_parameters > 0
                             ? std::min(1.0, double(cfg.matmul_parameters) / double(cfg.num_parameters))
                             : 1.0;
    const double step_bytes = stored_bytes * share;
    if (step_bytes <= 0) {
      std::printf("\nmemory read bandwidth: %.1f GB/s (the weights' size is unknown)\n", bw);
      return;
    }
    std::printf("\nmemory read bandwidth: %.1f GB/s -> batch-1 decode bound %.0f tokens/s "
                "(about %.0f MB per step: the weights' bytes times the %.0f%% of parameters a token "
                "passes through)\n",
                bw, bw * 1e9 / step_bytes, step_bytes / 1e6, 100 * share);
    return;
  }
  if (!f32) {
    std::printf("\n| %s linear [M,%d]x[%d,%d] | GFLOP/s |\n|---|---:|\n", name, K, K, N);
    for (int M : {1, 8, 32, 64, 128, 512}) {
      std::printf("| M=%d | %.0f |\n", M, CpuLinearGflops(dtype, M, N, K, repeats));
    }
  }
  const double peak = f32 ? SgemmGflops(128, N, K, repeats) : CpuLinearGflops(dtype, 128, N, K, repeats);
  const double bw = ReadBandwidthGBs(repeats);
  // The GEMM weights in the linear layers' type (wpe is never streamed
  // whole); int8's scales (4 bytes per column) are left out.
  const double weight_bytes = (f32 ? 4.0 : dtype == kernels::MatmulDtype::kInt8 ? 1.0 : 2.0) *
                              cfg.matmul_parameters;
  std::printf("\nmemory read bandwidth: %.1f GB/s -> batch-1 decode bound %.0f tokens/s "
              "(%.0f MB of %s weights per step)\n", bw, bw * 1e9 / weight_bytes, weight_bytes / 1e6,
              kernels::MatmulDtypeName(dtype));
  std::printf("%s peak (M=128): %.0f GFLOP/s -> compute bound %.0f tokens/s\n",
              f32 ? "sgemm" : absl::StrCat(name, " linear").c_str(), peak, peak * 1e9 / flop_per_token);
}

// A GPU's roofline: the vendor GEMM with its own algorithm choice, our
// batch-invariant Linear at the same shapes, and copy bandwidth.
void PrintDeviceRoofline(kernels::Backend& backend, const ModelInfo& cfg, int repeats,
                         double flop_per_token) {
  kernels::Roofline* roof = backend.roofline();
  if (roof == nullptr) return;
  const kernels::MatmulDtype dtype = backend.matmul_dtype();
  const int K = cfg.hidden, N = 3 * cfg.hidden;  // the QKV GEMM's shape
  std::printf("\nRoofline, same run (%s):\n\n| [M,%d]x[%d,%d] %s | library GEMM TFLOP/s | our "
              "Linear TFLOP/s |\n|---|---:|---:|\n",
              backend.Device().name.c_str(), K, K, N, kernels::MatmulDtypeName(dtype));
  double peak = 0;
  for (int M : {1, 8, 32, 256, 512, 4096}) {
    auto lib = roof->GemmTflops(M, N, K, dtype);
    const double ours = LinearTflops(backend, M, N, K, repeats, 20);
    if (lib.ok()) peak = std::max(peak, *lib);
    std::printf("| M=%d | %s | %.2f |\n", M, lib.ok() ? absl::StrFormat("%.2f", *lib).c_str() : "n/a",
                ours);
  }
  auto bw = roof->CopyGBs(int64_t{1} << 30);
  const double weight_bytes = kernels::DTypeBytes(kernels::ToDType(dtype)) *
                              double(cfg.matmul_parameters);
  if (bw.ok()) {
    // A copy reads and writes each byte: the read bandwidth is twice the copy rate.
    std::printf("\ndevice-to-device copy: %.0f GB/s copied (%.0f GB/s read + write) -> batch-1 "
                "decode bound %.0f tokens/s (%.0f MB of %s weights per step)\n",
                *bw, 2 * *bw, 2 * *bw * 1e9 / weight_bytes, weight_bytes / 1e6,
                kernels::MatmulDtypeName(dtype));
  }
  std::printf("library GEMM peak above: %.1f TFLOP/s -> compute bound %.0f tokens/s\n", peak,
              peak * 1e12 / flop_per_token);
}

// --model, or with --random_blocks a built-in Llama-family model in blocks.
absl::StatusOr<std::unique_ptr<LoadedModel>> LoadBenchmarkModel(const std::string& spec,
                                                                const std::string& blocks) {
  if (blocks.empty()) return LoadModel(spec);
  kernels::BlockFormat format;
  if (!BlockFormatByName(blocks, &format)) {
    std::vector<std::string> names;
    for (kernels::BlockFormat f : kernels::kAllBlockFormats) names.push_back(kernels::InfoOf(f).name);
    return absl::InvalidArgumentError(absl::StrCat("--random_blocks=", blocks, ": not a block format (",
                                                   absl::StrJoin(names, ", "), ")"));
  }
  return LoadBuiltinInBlocks(spec, format);
}

int Run() {
  kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const int steps = absl::GetFlag(FLAGS_decode_steps);
  const std::string spec = absl::GetFlag(FLAGS_model);
  auto options = kernels::BackendOptionsFromFlags(  // --device, --dtype, --kv_dtype
      [&](absl::string_view device) { return AutoMatmulDtype(spec, device); });
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 1;
  }
  auto backend = kernels::CreateBackend(*options);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str());
    return 1;
  }
  auto model = LoadBenchmarkModel(spec, absl::GetFlag(FLAGS_random_blocks));
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const ModelInfo& cfg = (*model)->info();
  const kernels::MatmulDtype dtype = options->matmul;
  ProfilingBackend prof(**backend);
  const bool profile = absl::GetFlag(FLAGS_profile);
  const bool greedy_on_device = absl::GetFlag(FLAGS_greedy_on_device);
  // A copy of the weights: `profiled` (over the timing decorator) needs its own.
  auto gpt_or = (*model)->Instantiate(**backend);
  if (!gpt_or.ok()) {
    std::fprintf(stderr, "%s\n", std::string(gpt_or.status().message()).c_str());
    return 1;
  }
  CausalLm& gpt = **gpt_or;
  std::unique_ptr<CausalLm> profiled;
  if (profile) {
    auto p = (*model)->Instantiate(prof);
    if (!p.ok()) return 1;
    profiled = std::move(*p);
  }
  // As the engine does at start (StepExecutor::Create): kernels compiled and
  // checked, buffers sized, for the largest step measured.
  int max_rows = 1, max_logit_rows = 1;
  for (int len : IntList(absl::GetFlag(FLAGS_prefill_lengths))) max_rows = std::max(max_rows, len);
  for (int batch : IntList(absl::GetFlag(FLAGS_decode_batches))) {
    max_rows = std::max(max_rows, batch);
    max_logit_rows = std::max(max_logit_rows, batch);
  }
  for (CausalLm* m : {&gpt, profiled.get()}) {
    if (m == nullptr) continue;
    if (absl::Status st = m->PrepareForBatches(max_rows, max_logit_rows); !st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  if (const kernels::Roofline* roof = (*backend)->roofline(); roof != nullptr) {
    const std::vector<std::string> plans = roof->GemmPlans();
    if (!plans.empty()) std::printf("GEMM plans ([N, K] of each weight shape):\n");
    for (const std::string& line : plans) std::printf("  %s\n", line.c_str());
    if (!plans.empty()) std::printf("\n");
  }
  const double flop_per_token = 2.0 * cfg.matmul_parameters;
  std::printf("%s (%s) on %s (%s), %s weights, linear layers in %s, KV cache in %s (%lld bytes per "
              "token), %d threads (OpenMP), %.0f MFLOP per token (GEMMs)\n\n",
              spec.c_str(), cfg.architecture.c_str(), options->device.c_str(),
              (*backend)->Device().name.c_str(), (*model)->stored_dtype().c_str(),
              kernels::MatmulDtypeName(dtype), kernels::KvFormatName(options->kv).c_str(),
              static_cast<long long>(gpt.CacheShape(1, 1).bytes_per_token()), kernels::CpuThreads(),
              flop_per_token / 1e6);

  std::printf("| workload | tokens/s | ms per step | GFLOP/s |\n|---|---:|---:|---:|\n");
  for (int len : IntList(absl::GetFlag(FLAGS_prefill_lengths))) {
    auto cache = KvCache::Create(**backend, gpt.CacheShape(KvCacheShape::BlocksFor(len), len));
    if (!cache.ok()) return 1;
    ForwardBatch b;
    b.AddSequence(BlockRange(0, KvCacheShape::BlocksFor(len)), 0, Tokens(len, cfg.vocab_size, 1));
    if ((*cache)->shape().state_slots > 0) b.states.push_back(StateOf(0, 0));  // recurrent state in slot 0
    const double s = MedianSeconds(repeats, [&] {
      (void)gpt.Forward(b, **cache, LogitsFor::kLastRowsOfEachSequence);
    });
    std::printf("| prefill %d | %.0f | %.1f | %.0f |\n", len, len / s, s * 1e3,
                len * flop_per_token / s / 1e9);
    if (profile) {  // the profiled model has a cache of its own backend
      auto pcache = KvCache::Create(prof, profiled->CacheShape(KvCacheShape::BlocksFor(len), len));
      if (!pcache.ok()) return 1;
      PrintProfile("prefill", prof, [&] {
        (void)profiled->Forward(b, **pcache, LogitsFor::kLastRowsOfEachSequence);
      });
    }
    std::fflush(stdout);
  }
  const int context = absl::GetFlag(FLAGS_decode_context);
  const int max_seq = context + steps + 2;
  if (context > 128 && options->device != "cpu") {
    std::fprintf(stderr, "--decode_context past 128 fills the cache on the CPU only\n");
    return 1;
  }
  for (int batch : IntList(absl::GetFlag(FLAGS_decode_batches))) {
    // Each sequence's blocks interleaved with the others', as a block pool
    // leaves them after churn.
    const int num_blocks = batch * KvCacheShape::BlocksFor(max_seq);
    std::vector<std::vector<int32_t>> blocks(batch);
    for (int s = 0; s < batch; ++s) blocks[s] = InterleavedBlocks(s, batch, max_seq);
    // A long context at a wide batch may not fit: say so and go on (on the
    // CPU an allocation past the memory would succeed and then be killed).
    const KvCacheShape shape = gpt.CacheShape(num_blocks, max_seq, batch);
    const double available = static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    if (options->device == "cpu" && shape.bytes() > 0.85 * available) {
      std::printf("| decode batch %d (context %d) | does not fit: %.1f GiB of KV cache, %.1f GiB free |\n", batch,
                  context, shape.bytes() / double(1 << 30), available / double(1 << 30));
      continue;
    }
    auto cache = KvCache::Create(**backend, shape);
    if (!cache.ok()) {
      std::printf("| decode batch %d (context %d) | does not fit: %s |\n", batch, context,
                  std::string(cache.status().message()).c_str());
      continue;
    }
    // Sequence s at `pos`: its blocks, and its recurrent state (a hybrid
    // model's) in slot s.
    auto add = [&](ForwardBatch& b, const KvCache& c, int s, int pos, absl::Span<const int32_t> tokens) {
      b.AddSequence(blocks[s], pos, tokens);
      if (c.shape().state_slots > 0) b.states.push_back(StateOf(s, pos));
    };
    // Each sequence starts with `context` positions of context: prefilled,
    // or (long contexts) every block's K and V a pattern that is a small
    // normal value in each format (0x11 bytes).
    auto fill = [&](CausalLm& m, KvCache& c) {
      if (context > 128) {
        for (int l = 0; l < c.shape().layers; ++l) {
          const kernels::KvLayer kv = c.layer(l);
          std::memset(kv.k, 0x11, kv.key_bytes());
          std::memset(kv.v, 0x11, kv.value_bytes());
        }
        return;
      }
      for (int s = 0; s < batch; ++s) {
        ForwardBatch b;
        add(b, c, s, 0, Tokens(context, cfg.vocab_size, s));
        (void)m.Forward(b, c, LogitsFor::kLastRowsOfEachSequence);
      }
    };
    fill(gpt, **cache);
    int pos = context;
    // Each repetition decodes positions [context - 8, context + 8) again
    // (for 16 steps), so the context is `context` on average over the timed
    // steps.
    absl::Status failed;  // a step that fails (past the model's positions) is reported, not timed
    const double sec = MedianSeconds(repeats, [&] {
      pos = context - steps / 2;
      for (int i = 0; i < steps && failed.ok(); ++i, ++pos) {
        ForwardBatch b;
        for (int s = 0; s < batch; ++s) add(b, **cache, s, pos, {(pos * 31 + s) % cfg.vocab_size});
        if (greedy_on_device) {
          failed = gpt.ForwardGreedy(b, **cache).status();
        } else {
          failed = gpt.Forward(b, **cache, LogitsFor::kLastRowsOfEachSequence).status();
        }
      }
    });
    if (!failed.ok()) {
      std::printf("| decode batch %d (context %d) | failed: %s |\n", batch, context,
                  std::string(failed.message()).c_str());
      continue;
    }
    std::printf("| decode batch %d (context %d)%s | %.0f | %.2f | %.0f |\n", batch, context,
                greedy_on_device ? ", best token on the device" : "",
                batch * steps / sec, sec / steps * 1e3, batch * steps * flop_per_token / sec / 1e9);
    if (profile) {
      auto pcache = KvCache::Create(prof, profiled->CacheShape(num_blocks, max_seq, batch));
      if (!pcache.ok()) return 1;
      fill(*profiled, **pcache);
      auto step = [&] {
        ForwardBatch b;
        for (int s = 0; s < batch; ++s) add(b, **pcache, s, context, {(context * 31 + s) % cfg.vocab_size});
        (void)profiled->Forward(b, **pcache, LogitsFor::kLastRowsOfEachSequence);
      };
      PrintProfile("decode step", prof, step);
    }
    std::fflush(stdout);
  }

  if (options->device == "cpu") {
    std::error_code ec;
    double weight_bytes = static_cast<double>(std::filesystem::file_size(spec, ec));
    if (ec) weight_bytes = 0;
    if (weight_bytes > 0 && dtype == kernels::MatmulDtype::kNative) {
      // Q3_K and IQ4_NL matrices run as Q6_K and Q8_0 blocks
      // (kernels::GgmlStandInFor): a step streams those.
      if (auto file = GgufFile::Open(spec); file.ok()) {
        for (const GgufTensor& t : file->tensors()) {
          const kernels::GgmlStandIn* s = kernels::GgmlStandInFor(t.type->id);
          if (t.ne.size() < 2 || s == nullptr) continue;
          const double ratio = double(GgmlTypeOf(static_cast<uint32_t>(s->as))->type_size) / t.type->type_size;
          weight_bytes += double(t.rows()) * double(t.row_bytes()) * (ratio - 1);
        }
      }
    }
    kernels::BlockFormat format;
    if (weight_bytes == 0 && BlockFormatByName(absl::GetFlag(FLAGS_random_blocks), &format)) {
      // A built-in in random blocks has no file: its parameters in blocks.
      const kernels::BlockFormatInfo info = kernels::InfoOf(format);
      weight_bytes = double(cfg.num_parameters) * info.block_bytes / info.block_values;
    }
    PrintCpuRoofline(cfg, dtype, repeats, flop_per_token, weight_bytes);
  } else {
    PrintDeviceRoofline(**backend, cfg, repeats, flop_per_token);
  }
  return 0;
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return flover::Run();
}
