// What a quantized KV cache costs in quality: the same text run through the
// model with an f32 KV cache and with each other format, teacher-forced in
// chunks (each chunk's keys and values are stored before its rows attend,
// so a row reads its own position quantized, as in decoding), comparing the
// next-token distribution at every position: KL(P_f32 || P_format) and
// whether the top token agrees, reported per range of positions.
//
//   tools/bazelw build //benchmarks:kv_quality
//   .bazel-root/bin/benchmarks/kv_quality --model=models/SmolLM2-135M-Instruct.Q4_1.gguf --dtype=native \
//       --text=/usr/share/common-licenses/GPL-3,/usr/share/common-licenses/GPL-2 --max_tokens=8192
//
// A model without a tokenizer (random weights) reads --max_tokens token ids
// drawn uniformly from its vocabulary (seed 54).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_threads.h"
#include "model/kv_cache.h"
#include "model/model_loader.h"

ABSL_FLAG(std::string, model, "", "Model directory, GGUF file or builtin:NAME");
ABSL_FLAG(std::string, dtype, "f32", "Linear layers' dtype (as --dtype), the same for every run");
ABSL_FLAG(std::string, formats, "bf16 q8_0 q4_0 q8_0,q4_0",
          "KV formats to compare with f32, space-separated (each as --kv_dtype)");
ABSL_FLAG(std::string, text, "", "Text files, comma-separated, read one after another");
ABSL_FLAG(int, max_tokens, 8192, "Positions to run (at most the model's)");
ABSL_FLAG(int, chunk, 256, "Rows per forward pass");
ABSL_FLAG(std::string, ranges, "512,1024,2048,4096,8192", "Ends of the ranges of positions reported");
ABSL_FLAG(int, threads, 2, "OpenMP threads");

namespace flover {
namespace {

struct Run {
  std::string name;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<CausalLm> model;
  std::unique_ptr<KvCache> cache;
};

// log-softmax of one row, in double.
void LogSoftmax(const float* x, int V, std::vector<double>* out) {
  out->resize(V);
  double mx = -INFINITY;
  for (int i = 0; i < V; ++i) mx = std::max(mx, double{x[i]});
  double sum = 0;
  for (int i = 0; i < V; ++i) sum += std::exp(double{x[i]} - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < V; ++i) (*out)[i] = double{x[i]} - lse;
}

struct Range {
  int end;
  int rows = 0, agree = 0;
  double kl_sum = 0, kl_max = 0;
  std::vector<double> kls;
};

int Main() {
  kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  auto loaded = LoadModel(absl::GetFlag(FLAGS_model));
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  const ModelInfo& info = (*loaded)->info();
  const int V = info.vocab_size;
  // The tokens: the text, or random ids.
  std::vector<int32_t> tokens;
  const int max_tokens = std::min(absl::GetFlag(FLAGS_max_tokens), info.max_positions);
  if ((*loaded)->tokenizer() != nullptr && !absl::GetFlag(FLAGS_text).empty()) {
    std::string text;
    for (absl::string_view path : absl::StrSplit(absl::GetFlag(FLAGS_text), ',')) {
      std::ifstream in{std::string(path)};
      std::stringstream s;
      s << in.rdbuf();
      if (s.str().empty()) {
        std::fprintf(stderr, "cannot read %s\n", std::string(path).c_str());
        return 1;
      }
      text += s.str() + "\n\n";
    }
    auto ids = (*loaded)->tokenizer()->Encode(text);
    if (!ids.ok()) return 1;
    tokens = *ids;
  } else {
    std::mt19937 rng(54);
    std::uniform_int_distribution<int> id(0, V - 1);
    for (int i = 0; i < max_tokens; ++i) tokens.push_back(id(rng));
  }
  if (static_cast<int>(tokens.size()) > max_tokens) tokens.resize(max_tokens);
  const int T = static_cast<int>(tokens.size());
  auto matmul = kernels::ParseMatmulDtype(absl::GetFlag(FLAGS_dtype));
  if (!matmul.ok()) return 1;

  std::vector<std::string> names = {"f32"};
  for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_formats), ' ', absl::SkipEmpty())) {
    names.emplace_back(f);
  }
  const int chunk = absl::GetFlag(FLAGS_chunk);
  std::vector<Run> runs;
  for (const std::string& name : names) {
    auto format = kernels::ParseKvFormat(name);
    if (!format.ok()) {
      std::fprintf(stderr, "%s\n", std::string(format.status().message()).c_str());
      return 1;
    }
    kernels::BackendOptions o;
    o.matmul = *matmul;
    o.kv = *format;
    Run r;
    r.name = name;
    auto backend = kernels::CreateBackend(o);
    if (!backend.ok()) {
      std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str());
      return 1;
    }
    r.backend = std::move(*backend);
    auto model = (*loaded)->Instantiate(*r.backend);
    if (!model.ok() || !(*model)->PrepareForBatches(chunk, chunk).ok()) return 1;
    r.model = std::move(*model);
    auto cache = KvCache::Create(*r.backend, r.model->CacheShape(KvCacheShape::BlocksFor(T), T));
    if (!cache.ok()) {
      std::fprintf(stderr, "%s\n", std::string(cache.status().message()).c_str());
      return 1;
    }
    r.cache = std::move(*cache);
    runs.push_back(std::move(r));
  }
  const std::vector<int32_t> blocks = BlockRange(0, KvCacheShape::BlocksFor(T));

  std::vector<std::vector<Range>> ranges(runs.size());
  for (size_t i = 1; i < runs.size(); ++i) {
    for (absl::string_view e : absl::StrSplit(absl::GetFlag(FLAGS_ranges), ',')) {
      ranges[i].push_back(Range{std::stoi(std::string(e))});
    }
  }
  std::vector<double> ref, got;
  std::vector<float> ref_logits, logits;
  for (int pos = 0; pos < T; pos += chunk) {
    const int n = std::min(chunk, T - pos);
    ForwardBatch b;
    b.AddSequence(blocks, pos, absl::MakeConstSpan(tokens).subspan(pos, n));
    if (!runs[0].model->Forward(b, *runs[0].cache, LogitsFor::kEveryRow, &ref_logits).ok()) return 1;
    for (size_t i = 1; i < runs.size(); ++i) {
      if (!runs[i].model->Forward(b, *runs[i].cache, LogitsFor::kEveryRow, &logits).ok()) return 1;
      for (int r = 0; r < n; ++r) {
        const float* x = ref_logits.data() + int64_t{r} * V;
        const float* y = logits.data() + int64_t{r} * V;
        LogSoftmax(x, V, &ref);
        LogSoftmax(y, V, &got);
        double kl = 0;
        for (int v = 0; v < V; ++v) kl += std::exp(ref[v]) * (ref[v] - got[v]);
        const bool agree = std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
        for (Range& g : ranges[i]) {
          if (pos + r < g.end) {
            ++g.rows;
            g.agree += agree;
            g.kl_sum += kl;
            g.kl_max = std::max(g.kl_max, kl);
            g.kls.push_back(kl);
            break;
          }
        }
      }
    }
    std::fprintf(stderr, "\r%d / %d positions", pos + n, T);
  }
  std::fprintf(stderr, "\n");
  std::printf("%s, %d positions, linear layers in %s; KL(P_f32 || P_format) in nats\n\n",
              absl::GetFlag(FLAGS_model).c_str(), T, absl::GetFlag(FLAGS_dtype).c_str());
  std::printf("| KV format | bytes/token | positions | mean KL | p99 KL | max KL | top-1 agreement |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|\n");
  for (size_t i = 1; i < runs.size(); ++i) {
    int begin = 0;
    for (Range& g : ranges[i]) {
      if (g.rows == 0) continue;
      std::sort(g.kls.begin(), g.kls.end());
      const double p99 = g.kls[std::min<size_t>(g.kls.size() - 1, g.kls.size() * 99 / 100)];
      std::printf("| %s | %lld | [%d, %d) | %.2e | %.2e | %.2e | %.2f%% |\n", runs[i].name.c_str(),
                  static_cast<long long>(runs[i].cache->shape().bytes_per_token()), begin,
                  std::min(g.end, T), g.kl_sum / g.rows, p99, g.kl_max, 100.0 * g.agree / g.rows);
      begin = g.end;
    }
  }
  std::printf("\nf32: %lld bytes/token\n", static_cast<long long>(runs[0].cache->shape().bytes_per_token()));
  return 0;
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return flover::Main();
}
