// The paper's comparison on this machine: 32 requests with 8-token prompts
// arrive as a Poisson process; each scheduler of the same engine (fusion,
// dynamic batching, static batching, sequential)
// serves them in-process, and we report total time, latency, TTFT and
// throughput per arrival rate. Writes JSON; benchmarks/plot_fusion.py draws it.
//
//   tools/bazelw run //benchmarks:fusion_benchmark -- --json=/tmp/fusion.json
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "model/model_loader.h"
#include "kernels/backend_factory.h"
#include "kernels/backend_flags.h"
#include "kernels/cpu/cpu_threads.h"

ABSL_FLAG(std::string, model, "builtin:gpt2-small", "Model");
ABSL_FLAG(int, threads, 2, "CPU threads");
ABSL_FLAG(int, num_requests, 32, "Requests per run");
ABSL_FLAG(int, prompt_len, 8, "Prompt tokens");
ABSL_FLAG(std::string, output_len, "128", "Output tokens: N or uniform:A:B");
ABSL_FLAG(std::string, gaps_ms, "0,50,200,1000", "Mean inter-arrival gaps in ms (0 = all at once)");
ABSL_FLAG(std::string, schedulers, "fusion,dynamic,static,sequential", "Schedulers to compare");
ABSL_FLAG(int, max_batch, 32, "Most sequences running at once");
ABSL_FLAG(int, batch_delay_ms, 50, "dynamic: gather window");
ABSL_FLAG(int, seed, 1, "Arrival and length seed");
ABSL_FLAG(std::string, json, "", "Write results here");
ABSL_FLAG(int, repeats, 1,
          "Runs per (gap, scheduler); each row is the run with the median total time");

namespace flover {
namespace {

struct Timing {
  absl::Time submit, first_token, finish;
  int tokens = 0;
};

class TimingSink : public TokenSink {
 public:
  explicit TimingSink(Timing* t) : t_(t) {}
  void OnToken(RequestId, const TokenEvent&) override {
    if (t_->tokens++ == 0) t_->first_token = absl::Now();
  }
  void OnFinish(RequestId, const FinishEvent&) override {
    std::lock_guard<std::mutex> lock(mu_);
    t_->finish = absl::Now();
    done_ = true;
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  Timing* t_;
  std::mutex mu_;
  bool done_ = false;
};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}

std::pair<int, int> ParseLengths(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  int a = 0, b = 0;
  if (parts.size() == 3 && parts[0] == "uniform" && absl::SimpleAtoi(parts[1], &a) &&
      absl::SimpleAtoi(parts[2], &b)) {
    return {a, b};
  }
  if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &a)) return {a, a};
  std::fprintf(stderr, "bad --output_len '%s'\n", spec.c_str());
  std::exit(2);
}

struct RunResult {
  std::string scheduler;
  double gap_ms;
  double total_s, mean_s, p50_s, p99_s, ttft_mean_s, ttft_p99_s, tokens_per_s;
  int64_t preemptions, steps;
};

RunResult RunOnce(CausalLm& model, const std::string& scheduler, double gap_ms) {
  EngineOptions o;
  o.scheduler.max_batch = absl::GetFlag(FLAGS_max_batch);
  o.scheduler.batch_delay = absl::Milliseconds(absl::GetFlag(FLAGS_batch_delay_ms));
  o.scheduler.static_flush = absl::Seconds(1);
  o.scheduler.policy = *ParseSchedulerPolicy(scheduler);
  const auto [lo, hi] = ParseLengths(absl::GetFlag(FLAGS_output_len));
  o.max_seq_len = std::min(model.info().max_positions, absl::GetFlag(FLAGS_prompt_len) + hi);
  auto engine = Engine::Create(model, nullptr, o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    std::exit(1);
  }
  const int n = absl::GetFlag(FLAGS_num_requests);
  std::mt19937 rng(absl::GetFlag(FLAGS_seed));
  std::exponential_distribution<double> gap(gap_ms > 0 ? 1.0 / gap_ms : 1.0);
  std::vector<Timing> timings(n);
  std::vector<std::shared_ptr<TimingSink>> sinks;
  const absl::Time start = absl::Now();
  absl::Time next = start;
  for (int i = 0; i < n; ++i) {
    if (gap_ms > 0 && i > 0) next += absl::Microseconds(static_cast<int64_t>(gap(rng) * 1000));
    absl::SleepFor(next - absl::Now());  // open loop: arrivals never wait for the server
    Request r;
    for (int t = 0; t < absl::GetFlag(FLAGS_prompt_len); ++t) {
      r.prompt.push_back(std::uniform_int_distribution<int>(0, model.info().vocab_size - 1)(rng));
    }
    r.stop.max_new_tokens = std::uniform_int_distribution<int>(lo, hi)(rng);
    r.stop.ignore_eos = true;
    r.sampling.temperature = 0;
    sinks.push_back(std::make_shared<TimingSink>(&timings[i]));
    timings[i].submit = absl::Now();
    if (!(*engine)->Submit(r, sinks.back()).ok()) std::exit(1);
  }
  for (auto& s : sinks) {
    while (!s->done()) absl::SleepFor(absl::Milliseconds(2));
  }
  const EngineStats stats = (*engine)->Stats();
  RunResult res{scheduler, gap_ms};
  std::vector<double> lat, ttft;
  absl::Time end = start;
  int64_t tokens = 0;
  for (const Timing& t : timings) {
    lat.push_back(absl::ToDoubleSeconds(t.finish - t.submit));
    ttft.push_back(absl::ToDoubleSeconds(t.first_token - t.submit));
    end = std::max(end, t.finish);
    tokens += t.tokens;
  }
  res.total_s = absl::ToDoubleSeconds(end - start);
  res.mean_s = Mean(lat);
  res.p50_s = Percentile(lat, 0.5);
  res.p99_s = Percentile(lat, 0.99);
  res.ttft_mean_s = Mean(ttft);
  res.ttft_p99_s = Percentile(ttft, 0.99);
  res.tokens_per_s = tokens / res.total_s;
  res.preemptions = stats.preemptions;
  res.steps = stats.steps;
  return res;
}

void Run() {
  kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  auto loaded = LoadModel(absl::GetFlag(FLAGS_model));
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    std::exit(1);
  }
  auto options = kernels::BackendOptionsFromFlags(  // --device, --dtype, --kv_dtype
      [&](absl::string_view device) { return AutoMatmulDtype(absl::GetFlag(FLAGS_model), device); });
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    std::exit(1);
  }
  auto backend = kernels::CreateBackend(*options);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str());
    std::exit(1);
  }
  auto created = (*loaded)->Instantiate(**backend);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", std::string(created.status().message()).c_str());
    std::exit(1);
  }
  CausalLm& model = **created;
  const kernels::BackendOptions* dtypes = &*options;
  std::printf("%s, %d requests, prompt %d, output %s, max_batch %d, %s, %d threads, %s linear "
              "layers, %s KV cache\n\n",
              absl::GetFlag(FLAGS_model).c_str(), absl::GetFlag(FLAGS_num_requests),
              absl::GetFlag(FLAGS_prompt_len), absl::GetFlag(FLAGS_output_len).c_str(),
              absl::GetFlag(FLAGS_max_batch), (*backend)->Device().name.c_str(), kernels::CpuThreads(),
              kernels::MatmulDtypeName(dtypes->matmul), kernels::KvFormatName(dtypes->kv).c_str());
  std::printf("| gap ms | scheduler | total s | mean s | p50 s | p99 s | TTFT mean s | TTFT p99 s | tok/s | steps | preemptions |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  // One untimed run first: buffers, KV pages and oneDNN primitives are
  // created on first use, which would otherwise land on the first row.
  (void)RunOnce(model, "fusion", 0);
  std::vector<RunResult> results;
  for (const std::string& g : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_gaps_ms), ','))) {
    double gap_ms = 0;
    if (!absl::SimpleAtod(g, &gap_ms)) std::exit(2);
    const std::vector<std::string> schedulers = absl::StrSplit(absl::GetFlag(FLAGS_schedulers), ',');
    // Repeats go round the schedulers, so a machine that drifts (these VMs
    // get faster over a run) favours none of them.
    std::vector<std::vector<RunResult>> tries(schedulers.size());
    for (int k = 0; k < std::max(1, absl::GetFlag(FLAGS_repeats)); ++k) {
      for (size_t i = 0; i < schedulers.size(); ++i) {
        tries[i].push_back(RunOnce(model, schedulers[i], gap_ms));
      }
    }
    for (std::vector<RunResult>& t : tries) {
      std::sort(t.begin(), t.end(),
                [](const RunResult& a, const RunResult& b) { return a.total_s < b.total_s; });
      const RunResult r = t[t.size() / 2];
      std::printf("| %.0f | %s | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %.0f | %ld | %ld |\n",
                  r.gap_ms, r.scheduler.c_str(), r.total_s, r.mean_s, r.p50_s, r.p99_s,
                  r.ttft_mean_s, r.ttft_p99_s, r.tokens_per_s, long(r.steps), long(r.preemptions));
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    std::ofstream out(path);
    out << "{\"model\": \"" << absl::GetFlag(FLAGS_model) << "\", \"output_len\": \""
        << absl::GetFlag(FLAGS_output_len) << "\", \"runs\": [\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const RunResult& r = results[i];
      out << absl::StrCat("  {\"scheduler\": \"", r.scheduler, "\", \"gap_ms\": ", r.gap_ms,
                          ", \"total_s\": ", r.total_s, ", \"mean_s\": ", r.mean_s,
                          ", \"p50_s\": ", r.p50_s, ", \"p99_s\": ", r.p99_s,
                          ", \"ttft_mean_s\": ", r.ttft_mean_s, ", \"ttft_p99_s\": ", r.ttft_p99_s,
                          ", \"tokens_per_s\": ", r.tokens_per_s, ", \"steps\": ", r.steps,
                          ", \"preemptions\": ", r.preemptions, "}")
          << (i + 1 < results.size() ? ",\n" : "\n");
    }
    out << "]}\n";
  }
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  flover::Run();
  return 0;
}
