// What the engine records for Prometheus: request outcomes and latencies,
// tokens, queue and KV occupancy, step sizes and times, prefix-cache hits
// and preemptions.
// The engine loop writes these as it goes (lock-free instruments); a scrape
// reads them from any thread without ever waiting on the loop.
#ifndef FLOVER_ENGINE_ENGINE_METRICS_H_
#define FLOVER_ENGINE_ENGINE_METRICS_H_

#include <array>
#include <string>

#include "absl/status/status.h"
#include "engine/request.h"
#include "util/prometheus.h"

namespace flover {

class EngineMetrics {
 public:
  EngineMetrics();

  // A request that ended with a status other than OK, by that status' code:
  // refused before it was queued (invalid, queue full, shutting down), or
  // ended by a cancel, a deadline or an error.
  void CountError(absl::StatusCode code);

  // Writes every family (names prefixed flover_) to `out`.
  void Write(prometheus::TextWriter& out) const;

  // Request outcomes (by FinishReason) and token counts.
  std::array<prometheus::Counter, kNumFinishReasons> finished;
  prometheus::Counter submitted;
  prometheus::Counter prompt_tokens;     // computed by the model
  prometheus::Counter generated_tokens;
  prometheus::Counter prefix_query_tokens;  // known tokens of admitted requests
  prometheus::Counter prefix_hit_tokens;    // of those, found in the prefix cache
  prometheus::Counter preemptions;          // running sequences sent back to the queue
  prometheus::Counter draft_tokens;         // speculative drafts verified
  prometheus::Counter accepted_tokens;      // of those, taken

  // Latencies, in seconds.
  prometheus::Histogram queue_time;         // submitted -> admitted to the batch
  prometheus::Histogram time_to_first_token;  // submitted -> first token sampled
  prometheus::Histogram inter_token_latency;  // between consecutive tokens of a request
  prometheus::Histogram time_per_output_token;  // per request: (last - first) / (n - 1)
  prometheus::Histogram e2e_latency;        // submitted -> finished

  // Occupancy, as of the last change.
  prometheus::Gauge running;
  prometheus::Gauge waiting;
  prometheus::Gauge kv_bytes_in_use;  // blocks running sequences hold
  prometheus::Gauge kv_bytes_cached;  // idle blocks kept for prefix reuse
  prometheus::Gauge kv_bytes_total;
  prometheus::Gauge kv_bytes_per_token;

  // Steps.
  prometheus::Counter steps;
  prometheus::Histogram step_seconds;       // one fused forward pass (plus its broadcast)
  prometheus::Histogram step_rows;          // token rows in one forward pass
  prometheus::Histogram step_prompt_tokens; // prompt tokens fused into one step
  prometheus::Histogram step_sampling_seconds;  // a step's sampling, after its forward pass

 private:
  // Indexed by absl::StatusCode (0..16).
  std::array<prometheus::Counter, 17> errors_;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_ENGINE_METRICS_H_
