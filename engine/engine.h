// The temporal-fusion engine: accepts requests at any time from any thread,
// and on one loop thread fuses every in-flight sequence into one forward pass
// per token step (new prompts join the same forward as decoding sequences),
// streams each sampled token to the request's sink, and gives a sequence's
// KV blocks back the step it finishes. The step is planned by Schedule();
// KV blocks come from pools sized by memory (CacheManager), sequences hold what
// their positions fill, prompts reuse cached prefixes, and when blocks run
// out the newest running sequence is preempted and later recomputed (its
// output unchanged: every step is batch-invariant).
#ifndef FLOVER_ENGINE_ENGINE_H_
#define FLOVER_ENGINE_ENGINE_H_

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/collectives.h"
#include "model/causal_lm.h"
#include "engine/engine_metrics.h"
#include "engine/cache_manager.h"
#include "engine/image_features.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/draft_model.h"
#include "engine/draft_verifier.h"
#include "engine/speculation.h"
#include "engine/step_executor.h"
#include "model/vision/image_encoder.h"
#include "tokenizer/tokenizer.h"

namespace flover {

struct EngineOptions {
  SchedulerOptions scheduler;
  int max_seq_len = 1024;       // positions one sequence may reach (<= model positions)
  KvCacheOptions kv_cache;      // the KV cache's size
  bool prefix_caching = true;   // reuse cached K/V of prompts' leading blocks
  // Models with recurrent layers: a prompt's state is kept as a prefix
  // checkpoint every this many positions (a multiple of the block size; 0:
  // none in between) and at its last block boundary, so a later prompt with
  // that prefix resumes from it (CacheManager).
  int state_checkpoint_interval = 1024;
  int max_queue = 1024;         // waiting requests; more are refused at once
  int max_new_tokens_limit = 4096;
  SpeculativeOptions speculative;  // engine/speculation.h
  // --speculative=draft: the model that proposes the drafts (the target's
  // vocabulary; outlives the engine), and its KV cache's bytes (0: what
  // max_batch sequences of max_seq_len could fill, within the default).
  CausalLm* draft_model = nullptr;
  int64_t draft_kv_cache_bytes = 0;
  // --speculative=mtp: the model's multi-token-prediction layer
  // (LoadedModel::InstantiateMtp; outlives the engine), on one rank; its KV
  // cache takes draft_kv_cache_bytes.
  CausalLm* mtp_model = nullptr;
  // Takes embedding requests (Request::embed): the model keeps its final
  // hidden rows of every step (a [rows, hidden] copy per step). One rank.
  bool embeddings = false;
  // An embedding model: only embedding and scoring requests are taken (a
  // generation request is refused naming `model`).
  bool embedding_only = false;
  // The time arrivals, deadlines, batching windows and latency metrics are
  // measured in; null = absl::Now. Tests inject a manual clock so that a
  // deadline fires at a step of their choosing, not after a guessed time.
  // Moving an injected clock does not wake an idle engine: the next
  // request, cancel or step does. Shutdown's drain timeout is always real time.
  std::function<absl::Time()> clock;
  // A vision model's image side (outlives the engine; rank 0): requests may
  // hold images (Request::images). Between steps the engine encodes at most
  // vision_tiles_per_step units (ImageEncoder::UnitsOf: SmolVLM's tiles,
  // groups of Qwen3-VL's tower blocks, Gemma 3's tower layers), so that running sequences keep
  // decoding while a large image is encoded; a request's prompt is
  // scheduled once its images are. Features are kept by image key, up to
  // vision_cache_bytes, so an image sent again is not encoded again.
  ImageEncoder* vision = nullptr;
  int vision_tiles_per_step = 1;  // a 512-px SmolVLM tile: ~1 s on 2 CPU cores
  int64_t vision_cache_bytes = int64_t{256} << 20;
  int max_image_tiles = 256;  // per request
};

struct EngineStats {
  int queued = 0;
  int active = 0;
  int max_running = 0;          // --max_batch
  int64_t kv_bytes_in_use = 0;  // blocks running sequences hold
  int64_t kv_bytes_cached = 0;  // idle blocks kept for prefix reuse
  int64_t kv_bytes_peak = 0;    // the most kv_bytes_in_use has been
  int64_t kv_bytes_total = 0;
  int64_t kv_tokens_total = 0;  // the cache's capacity in positions
  // K and V of one position in every layer (--kv_dtype decides it; local
  // layers' blocks apart are not counted).
  int64_t kv_bytes_per_token = 0;
  // Models with recurrent layers: the cache's state slots (running
  // sequences' and prefix checkpoints'), each this many bytes (in
  // kv_bytes_total too); 0 without.
  int64_t state_slots = 0;
  int64_t state_slot_bytes = 0;
  int64_t steps = 0;
  int64_t prompt_tokens = 0;      // computed by the model (cache hits are not)
  int64_t generated_tokens = 0;
  int64_t prefix_query_tokens = 0;  // prompt tokens of admitted requests
  int64_t prefix_hit_tokens = 0;    // of those, found in the prefix cache
  int64_t preemptions = 0;
  int64_t submitted = 0;
  int64_t image_tiles_encoded = 0;   // units (tiles, groups of tower blocks) by the vision encoder
  int64_t image_cache_hits = 0;      // images whose features were kept
  int64_t draft_tokens = 0;     // speculative drafts verified
  int64_t accepted_tokens = 0;  // of those, taken
  std::array<int64_t, kNumFinishReasons> finished{};  // by FinishReason
};

class Engine {
 public:
  // `model`, `tokenizer` (may be null) and `channel` must outlive the
  // engine. With tensor parallelism (`channel` of tp_size > 1, on rank 0),
  // every step is broadcast to the other ranks, which run
  // RunTensorParallelWorker. Creates the KV cache and prepares the model for
  // every step size (StepExecutor::Create).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(CausalLm& model,
                                                        const Tokenizer* tokenizer,
                                                        const EngineOptions& options,
                                                        ControlChannel* channel = nullptr);
  ~Engine();  // Shutdown(absl::ZeroDuration()) if not yet shut down

  // Validates and queues a request; its events go to `sink`. Errors:
  // InvalidArgument naming the field, ResourceExhausted when the queue is
  // full or the request cannot fit in the KV cache even alone, Unavailable
  // after Shutdown began.
  absl::StatusOr<RequestId> Submit(Request request, std::shared_ptr<TokenSink> sink);

  // The request finishes with kCancelled at the next step (queued or running).
  // NotFound if it is unknown or already finished.
  absl::Status Cancel(RequestId id);

  EngineStats Stats() const;

  // Prometheus instruments, updated as the engine runs; reading them never
  // waits on the engine loop. Front ends count the requests they refuse
  // before Submit with metrics().CountError.
  EngineMetrics& metrics() { return metrics_; }
  const EngineMetrics& metrics() const { return metrics_; }

  // False once Shutdown has begun (requests are then refused).
  bool Accepting() const;

  // OK, or the error that stopped the engine for good (a device fault, a
  // failed collective between tensor-parallel ranks): it then refuses every
  // request.
  absl::Status FatalError() const;

  // Refuses new requests, lets queued and running ones finish for up to
  // `drain_timeout`, cancels whatever is left, and stops the loop thread.
  void Shutdown(absl::Duration drain_timeout);

  const CausalLm& model() const { return model_; }
  const EngineOptions& options() const { return options_; }
  // The most positions one sequence can reach: max_seq_len, or the whole KV
  // cache where that holds fewer and no window gives blocks back, or the
  // local blocks where they hold less than a window (a longer request is
  // refused as RESOURCE_EXHAUSTED: it could not run even alone).
  int max_context() const;

 private:
  struct Sequence;  // a request from submission to finish

  Engine(CausalLm& model, const Tokenizer* tokenizer, const EngineOptions& options,
         std::unique_ptr<StepExecutor> executor, std::unique_ptr<Drafter> draft, ControlChannel* channel);
  bool tensor_parallel() const { return channel_ != nullptr && channel_->world().tp_size > 1; }
  // Fails every request and refuses new ones.
  void Fail(const absl::Status& error);
  absl::Status Validate(const Request& r) const;
  absl::StatusOr<RequestId> Queue(Request request, std::shared_ptr<TokenSink> sink);
  // The KV blocks in use and cached, from kv_, into stats_; engine
  // thread only (kv_ is), with mu_ held.
  void RecordKvUseLocked();
  // Copies the occupancy in stats_ to the gauges; called with mu_ held.
  void PublishOccupancyLocked();
  void Loop();
  // One step: Plan, execute (broadcast first with tensor parallelism),
  // ProcessOutputs. Returns false when there was nothing to run.
  bool Step();
  // Schedules the step, preempts and admits as it says, gives the scheduled
  // sequences their blocks and fills step_ (plan->seqs then lists what
  // runs). Returns false when there is nothing to run.
  bool Plan(StepPlan* plan);
  // Running -> queued (front), its blocks released, to be computed again.
  void Preempt(RequestId id);
  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }
  // Applies a step's results: computed tokens (full blocks registered for
  // prefix reuse), one sampled token for each sequence whose known tokens
  // are all computed, finishes, stats.
  // `now` is when the step's logits were ready. When the step ran greedily
  // (PlainGreedyStep), `result` holds each logit row's best token in place of
  // the logits.
  void ProcessOutputs(const StepPlan& plan, const StepResult& result, absl::Time now);
  // Every sequence of the plan samples greedily with no logits processor
  // and wants no logprobs: the step needs only each row's best token.
  bool PlainGreedyStep(const StepPlan& plan) const;
  // Sequences in decode that may speculate append draft tokens, verified in
  // the next step, within the step's draft rows (SpeculativeOptions).
  void ProposeDrafts();
  // With a drafter: what the step computed that stands (Drafter::Computed).
  void TellDrafter(const StepPlan& plan);
  // A drafter's error: speculation goes on without it.
  void DrafterFailed(const absl::Status& st);
  // The tokens of what `s`'s constraint fixes next (ConstraintState's
  // ForcedBytes, as the tokenizer spells them), at most `max_tokens`; none
  // without a constraint, a tokenizer or such bytes.
  std::vector<int32_t> ForcedDraft(Sequence& s, int max_tokens) const;
  void Finish(Sequence& seq, FinishReason reason, absl::Status error = absl::OkStatus(),
              std::vector<float> embedding = {}, std::vector<float> logits = {});
  // An embedding request's rows of this step (the chunk `p`, from the
  // step's hidden row `first_row`) into its pooling.
  void PoolRows(Sequence& s, const ScheduledSequence& p, size_t first_row);
  // Appends a sampled token, emits it, and decides whether the sequence stops.
  void Emit(Sequence& seq, int32_t token, float logprob,
            std::vector<std::pair<int32_t, float>> top, absl::Time now);
  absl::Time NextWakeup() const;
  // Encodes up to vision_tiles_per_step tiles of the oldest sequences in
  // encoding_, and moves each sequence whose images are all encoded to
  // queue_ with its given rows. Returns whether it did anything.
  bool EncodeImages();

  CausalLm& model_;
  const Tokenizer* tokenizer_;
  const EngineOptions options_;
  std::unique_ptr<StepExecutor> executor_;
  std::unique_ptr<Drafter> draft_;  // --speculative=draft or mtp, else null
  ControlChannel* channel_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;  // guarded by mu_
  absl::flat_hash_set<RequestId> cancels_;         // guarded by mu_
  absl::flat_hash_set<RequestId> live_ids_;        // guarded by mu_
  bool accepting_ = true;                          // guarded by mu_
  bool stop_ = false;                              // guarded by mu_
  absl::Status fatal_;                             // guarded by mu_
  RequestId next_id_ = 1;                          // guarded by mu_
  EngineStats stats_;  // guarded by mu_; occupancy only (totals: metrics_)
  EngineMetrics metrics_;                          // lock-free

  // Loop-thread state.
  CacheManager cache_;  // the blocks and state slots each running sequence holds
  std::deque<std::unique_ptr<Sequence>> queue_;
  // Sequences whose images are being encoded, oldest first; each joins
  // queue_ once its images are (EncodeImages).
  std::deque<std::unique_ptr<Sequence>> encoding_;
  // Encoded images' features by key (options_.vision_cache_bytes).
  ImageFeatureCache features_;
  std::vector<std::unique_ptr<Sequence>> active_;  // in admission order
  absl::flat_hash_map<RequestId, Sequence*> by_id_;  // this step's sequences
  StepInput step_;
  // This step's tokens per sampling sequence, before they are emitted: one,
  // or with drafts, the drafts taken and the token after them; and the
  // histories SampleAndAccept builds for verified drafts.
  std::vector<SampledTokens> sampled_;
  std::vector<std::vector<int32_t>> histories_;
  std::vector<int32_t> rows_;  // Plan's scratch: a sequence's rows of the step
  std::thread thread_;
};

// Ranks > 0 of a tensor-parallel job: sets up the same steps Engine::Create
// sets up on rank 0 from the same options (the model prepared for every step
// size, the KV cache with rank 0's block count), then runs rank 0's steps
// until it broadcasts a stop (RunTensorParallelWorker). An error means the
// ranks are out of step: end the job.
absl::Status RunEngineWorker(CausalLm& model, const EngineOptions& options, ControlChannel& channel);

}  // namespace flover

#endif  // FLOVER_ENGINE_ENGINE_H_
