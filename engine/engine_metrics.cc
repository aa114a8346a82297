#include "engine/engine_metrics.h"

#include <vector>

#include "absl/strings/ascii.h"

namespace flover {
namespace {

// Seconds from 100 us (a GPU decode step) to 100 s (a long request on a CPU).
std::vector<double> LatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,     1,      2.5,   5,      10,    25,   50,    100};
}

// 1, 2, 4, ... 8192 rows.
std::vector<double> RowBounds() { return prometheus::Histogram::ExponentialBounds(1, 2, 14); }

std::vector<double> PromptTokenBounds() {
  std::vector<double> b = {0};
  for (double v : RowBounds()) b.push_back(v);
  return b;
}

}  // namespace

EngineMetrics::EngineMetrics()
    : queue_time(LatencyBounds()),
      time_to_first_token(LatencyBounds()),
      inter_token_latency(LatencyBounds()),
      time_per_output_token(LatencyBounds()),
      e2e_latency(LatencyBounds()),
      step_seconds(LatencyBounds()),
      step_rows(RowBounds()),
      step_prompt_tokens(PromptTokenBounds()),
      step_sampling_seconds(LatencyBounds()) {}

void EngineMetrics::CountError(absl::StatusCode code) {
  const int c = static_cast<int>(code);
  if (c > 0 && c < static_cast<int>(errors_.size())) errors_[c].Increment();
}

void EngineMetrics::Write(prometheus::TextWriter& out) const {
  using prometheus::Labels;
  auto counter = [&out](const char* name, const char* help, const prometheus::Counter& c) {
    out.Family(name, "counter", help);
    out.Sample(name, {}, c.Value());
  };
  auto gauge = [&out](const char* name, const char* help, double v) {
    out.Family(name, "gauge", help);
    out.Sample(name, {}, v);
  };
  auto histogram = [&out](const char* name, const char* help, const prometheus::Histogram& h) {
    out.Family(name, "histogram", help);
    out.HistogramSamples(name, {}, h.Read());
  };

  counter("flover_requests_submitted_total", "Requests accepted into the queue.", submitted);
  out.Family("flover_requests_finished_total", "counter",
             "Requests the engine finished, by how they ended (length, stop, eos, cancelled, "
             "deadline, error).");
  for (int r = 0; r < kNumFinishReasons; ++r) {
    out.Sample("flover_requests_finished_total",
               {{"reason", std::string(FinishReasonName(static_cast<FinishReason>(r)))}},
               finished[r].Value());
  }
  out.Family("flover_request_errors_total", "counter",
             "Requests that ended with a status other than OK, by status code: refused before "
             "queueing, cancelled, past their deadline, or failed.");
  for (size_t c = 1; c < errors_.size(); ++c) {
    out.Sample("flover_request_errors_total",
               {{"code", absl::AsciiStrToLower(
                             absl::StatusCodeToString(static_cast<absl::StatusCode>(c)))}},
               errors_[c].Value());
  }
  counter("flover_prompt_tokens_total", "Prompt tokens computed by the model.", prompt_tokens);
  counter("flover_generated_tokens_total", "Tokens generated (sampled) for requests.",
          generated_tokens);
  counter("flover_prefix_cache_queries_total",
          "Tokens of admitted requests looked up in the prefix cache.", prefix_query_tokens);
  counter("flover_prefix_cache_hits_total",
          "Tokens of admitted requests whose K/V the prefix cache held (not computed).",
          prefix_hit_tokens);
  counter("flover_preemptions_total",
          "Running requests sent back to the queue for KV blocks (computed again when resumed).",
          preemptions);
  counter("flover_spec_draft_tokens_total",
          "Speculative draft tokens verified in a step (outputs are the same with and without them).",
          draft_tokens);
  counter("flover_spec_accepted_tokens_total", "Of the verified draft tokens, those taken.", accepted_tokens);

  histogram("flover_request_queue_time_seconds",
            "Time from submission to admission into the running batch.", queue_time);
  histogram("flover_time_to_first_token_seconds",
            "Time from submission to the first generated token.", time_to_first_token);
  histogram("flover_inter_token_latency_seconds",
            "Time between consecutive generated tokens of a request.", inter_token_latency);
  histogram("flover_time_per_output_token_seconds",
            "Per request with two or more tokens: (last token - first token) / (tokens - 1).",
            time_per_output_token);
  histogram("flover_request_e2e_latency_seconds",
            "Time from submission to the end of a request, whatever its finish reason.",
            e2e_latency);

  gauge("flover_requests_running", "Requests in the running batch.", running.Value());
  gauge("flover_requests_waiting", "Requests queued for admission (preempted ones included).",
        waiting.Value());
  gauge("flover_kv_cache_used_bytes",
        "Bytes of KV cache blocks running requests hold (per tensor-parallel rank).",
        kv_bytes_in_use.Value());
  gauge("flover_kv_cache_cached_bytes",
        "Bytes of idle KV cache blocks kept for prefix reuse, evicted when blocks are needed (per "
        "tensor-parallel rank).",
        kv_bytes_cached.Value());
  gauge("flover_kv_cache_capacity_bytes", "Bytes of KV cache (per tensor-parallel rank).",
        kv_bytes_total.Value());
  gauge("flover_kv_cache_bytes_per_token",
        "Bytes of K and V one position takes in every layer, as --kv_dtype stores them (per "
        "tensor-parallel rank).",
        kv_bytes_per_token.Value());

  counter("flover_steps_total", "Fused forward passes run.", steps);
  histogram("flover_step_duration_seconds",
            "Time of one fused forward pass, including its broadcast to tensor-parallel ranks.",
            step_seconds);
  histogram("flover_step_rows", "Token rows in one fused forward pass.", step_rows);
  histogram("flover_step_prompt_tokens", "Prompt tokens fused into one forward pass.",
            step_prompt_tokens);
  histogram("flover_step_sampling_seconds",
            "Time of a step's sampling after its forward pass: logits processors, constraint masks and "
            "their advance, the draw (all sequences, in parallel).",
            step_sampling_seconds);
}

}  // namespace flover
