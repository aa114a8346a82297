#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/draft_verifier.h"
#include "engine/mtp_drafter.h"
#include "engine/logits_processors.h"
#include "engine/sequence_observer.h"
#include "engine/text_output.h"
#include "engine/tp_worker.h"
#include "kernels/cpu/cpu_threads.h"
#include "tokenizer/unicode.h"
#include "util/field_error.h"

namespace flover {
namespace {

// Drops the sequences that finished (their events are already sent).
template <typename Container>
void EraseFinished(Container& c) {
  c.erase(std::remove_if(c.begin(), c.end(), [](const auto& s) { return s->finished; }), c.end());
}

}  // namespace

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kEos: return "eos";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kDeadline: return "deadline";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {

// `r`'s prompt as the prefix cache keys it: each given row a negative id
// (never a token) mixed from its span's key and its place in the span, so
// K/V is reused only where the same content stands at the same place.
std::vector<int32_t> PrefixKeys(const Request& r) {
  std::vector<int32_t> keys = r.prompt;
  for (const GivenPromptRows& g : r.given_rows) {
    for (int32_t i = 0; i < g.count; ++i) {
      uint64_t x = g.key + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);  // splitmix64
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      x ^= x >> 31;
      keys[g.position + i] = -1 - static_cast<int32_t>(x & 0x7ffffffe);
    }
  }
  return keys;
}

}  // namespace

struct Engine::Sequence {
  Sequence(RequestId id, Request r, std::shared_ptr<TokenSink> s, absl::Time now)
      : id(id), request(std::move(r)), sink(std::move(s)), arrival(now),
        sampler(request.sampling, request.prompt.size()), tokens(request.prompt) {
    if (!request.given_rows.empty()) SetGivenRows(std::move(request.given_rows));
  }

  RequestId id;
  Request request;
  std::shared_ptr<TokenSink> sink;
  absl::Time arrival;
  absl::Time first_token, last_token;  // set from the first generated token on
  Sampler sampler;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  // With given prompt rows: `tokens` as the prefix cache keys them, each
  // given row a negative id made from its span's key and place (see
  // PrefixKeys); else empty, and the cache keys `tokens`.
  std::vector<int32_t> keys;
  const std::vector<int32_t>& prefix_keys() const { return keys.empty() ? tokens : keys; }
  // The given spans one step computes whole (GivenPromptRows::whole), for
  // the scheduler.
  std::vector<WholeSpan> whole;
  void SetGivenRows(std::vector<GivenPromptRows> rows) {
    request.given_rows = std::move(rows);
    keys = PrefixKeys(request);
    whole.clear();
    for (const GivenPromptRows& g : request.given_rows) {
      if (g.whole) whole.push_back({g.position, g.position + g.count});
    }
  }
  // Its images' features as they are encoded (EncodeImages): those of the
  // first image_rows.size() images, then `partial` rows of the next one's
  // first partial_units units (ImageEncoder::UnitsOf).
  std::vector<std::shared_ptr<const std::vector<float>>> image_rows;
  std::vector<float> partial;
  int partial_units = 0;
  bool running = false;         // admitted (else queued, maybe after a preemption)
  int computed = 0;             // tokens whose K/V are in `blocks`
  SequenceCache cache;         // its blocks and state slot, while running (CacheManager)
  int generated = 0;
  // Its place in request.constraint (null without one): the step's sampling
  // loop advances it (in parallel), the sampler's mask and an observer read it.
  std::unique_ptr<ConstraintState> constraint;
  // Told about every emitted token and the finish, in order: the text and
  // its stop strings (with a tokenizer), the constraint.
  std::vector<std::unique_ptr<SequenceObserver>> observers;
  bool finished = false;
  // Speculation: drafts to verify after `tokens`, apart from them (the
  // sequence is then in decode: computed is one short of its tokens);
  // `pacer` says when and how many it drafts next.
  std::vector<int32_t> drafts;
  std::optional<DraftPacer> pacer;
  // The drafts are the constraint's forced bytes, not an n-gram's guess
  // (the pacer learns from n-gram drafts only).
  bool forced_drafts = false;
  // Tokens the constraint has taken in this step (verified drafts) that
  // Emit has not yet passed on: its observer reads the state at the last.
  int constraint_ahead = 0;
  // Its tokens and drafts: what the scheduler sees as known.
  int known() const { return static_cast<int>(tokens.size() + drafts.size()); }
  // An embedding request: its rows pooled as its prompt's chunks compute
  // (made at admission). Mean and CLS take no cached prefix (its rows were
  // never computed for it), so they start over when preempted.
  std::optional<PoolingSum> pooled;
  // A scoring request's logits of its score_tokens, once its prompt is done.
  std::vector<float> scores;
  bool embedding() const { return request.embed.has_value(); }
  bool scoring() const { return !request.score_tokens.empty(); }
  bool takes_prefix() const { return !embedding() || request.embed->kind == Pooling::Kind::kLast; }
  bool prompt_only() const { return PromptOnly(request); }
};

namespace {

// The tokens that end a sequence as the model's EOS does (finish reason
// EOS, no text): the model's EOS ids and a chat's end of turn, unless the
// request ignores them.
std::vector<int32_t> EosLikeIds(const ModelInfo& info, const StopConditions& stop) {
  if (stop.ignore_eos) return {};
  std::vector<int32_t> ids = info.eos_token_ids;
  ids.insert(ids.end(), stop.end_of_turn_ids.begin(), stop.end_of_turn_ids.end());
  return ids;
}

bool EndsAsEos(const ModelInfo& info, const StopConditions& stop, int32_t token) {
  return !stop.ignore_eos &&
         (info.IsEos(token) || std::find(stop.end_of_turn_ids.begin(), stop.end_of_turn_ids.end(),
                                         token) != stop.end_of_turn_ids.end());
}

// Ends a sequence (stop) once its constraint admits nothing more, or has
// refused a token (the step's sampling loop advances the constraint).
class ConstraintObserver final : public SequenceObserver {
 public:
  ConstraintObserver(ConstraintState* state, const int* ahead) : state_(state), ahead_(ahead) {}
  // The engine advanced the state with the token already (in parallel with
  // the step's other sequences), and with `*ahead` tokens after it, none of
  // which it would have taken had this one ended the output.
  std::optional<FinishReason> OnToken(int32_t, bool end_of_sequence, TokenEvent&) override {
    if (end_of_sequence || *ahead_ > 0) return std::nullopt;
    // The mask allowed only what the state accepts; a refusal would mean a
    // constraint that contradicts itself, and ends the output where it is.
    if (state_->failed() || !state_->CanContinue()) return FinishReason::kStop;
    return std::nullopt;
  }
  void OnFinish(FinishEvent&) override {}

 private:
  ConstraintState* state_;
  const int* ahead_;
};

// The step set-up every rank derives from the engine's options (rank 0 in
// Engine::Create, the others in RunEngineWorker), so they cannot differ: the
// model prepared for every step size, and the KV cache.
absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(CausalLm& model,
                                                                 const EngineOptions& options,
                                                                 ControlChannel* channel) {
  const SchedulerOptions& s = options.scheduler;
  const int max_rows = MaxRowsPerStep(s, options.max_seq_len);
  // A row of logits per sequence, and one per draft row being verified.
  const int drafts = options.speculative.mode == SpeculativeMode::kOff ? 0 : options.speculative.max_step_rows;
  // Recurrent state: a second slot for each sequence where drafts are
  // verified; a quarter as many again for prefix checkpoints.
  return StepExecutor::Create(model, options.kv_cache, s.max_batch, options.max_seq_len, max_rows,
                              std::min(max_rows, s.max_batch + drafts), channel, drafts > 0 ? 2 : 1,
                              options.prefix_caching ? std::max(2, s.max_batch / 4) : 0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(CausalLm& model,
                                                       const Tokenizer* tokenizer,
                                                       const EngineOptions& options,
                                                       ControlChannel* channel) {
  const SchedulerOptions& s = options.scheduler;
  const int positions = model.info().max_positions;
  if (s.max_batch < 1) return absl::InvalidArgumentError("max_batch must be >= 1");
  if (s.max_tokens_per_step < 1) {
    return absl::InvalidArgumentError("max_tokens_per_step must be >= 1");
  }
  if (options.max_seq_len < 2 || options.max_seq_len > positions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_seq_len must be in [2, %d] (the model's positions), got %d", positions,
        options.max_seq_len));
  }
  if (options.max_queue < 0) return absl::InvalidArgumentError("max_queue must be >= 0");
  if (s.block_size != KvCacheShape::kBlockSize) {
    return absl::InvalidArgumentError(absl::StrCat("the scheduler's block size must be the KV cache's, ",
                                                   KvCacheShape::kBlockSize));
  }
  if (channel != nullptr && !channel->world().is_leader()) {
    return absl::InvalidArgumentError("the engine runs on rank 0; other ranks run workers");
  }
  if (absl::Status st = ValidateSpeculativeOptions(options.speculative); !st.ok()) return st;
  std::unique_ptr<Drafter> draft;
  if (options.speculative.mode == SpeculativeMode::kDraft) {
    CausalLm* d = options.draft_model;
    if (d == nullptr) return absl::InvalidArgumentError("speculative mode draft needs a draft model");
    auto created = DraftModel::Create(*d, model.info(), s.max_batch, options.max_seq_len,
                                      MaxRowsPerStep(s, options.max_seq_len), options.draft_kv_cache_bytes);
    if (!created.ok()) return created.status();
    draft = std::move(*created);
  } else if (options.speculative.mode == SpeculativeMode::kMtp) {
    if (options.mtp_model == nullptr) {
      return absl::InvalidArgumentError("speculative mode mtp needs the model's multi-token-prediction layer");
    }
    if (channel != nullptr && channel->world().tp_size > 1) {
      return absl::InvalidArgumentError("--speculative=mtp runs with one rank (no tensor parallelism)");
    }
    // Before the model's steps are prepared: it keeps its hidden rows.
    auto created = MtpDrafter::Create(*options.mtp_model, model, s.max_batch, options.max_seq_len,
                                      MaxRowsPerStep(s, options.max_seq_len), options.draft_kv_cache_bytes);
    if (!created.ok()) return created.status();
    draft = std::move(*created);
  }
  if (options.embeddings) {
    if (channel != nullptr && channel->world().tp_size > 1) {
      return absl::InvalidArgumentError("embeddings run with one rank (no tensor parallelism)");
    }
    // Before the model's steps are prepared: it keeps its hidden rows.
    if (absl::Status st = model.KeepFinalHidden(true); !st.ok()) return st;
  }
  auto executor = CreateStepExecutor(model, options, channel);
  if (!executor.ok()) return executor.status();
  // The scheduler counts on blocks behind a window coming back, and on
  // local blocks where the cache keeps them apart.
  EngineOptions o = options;
  const KvCacheShape& shape = (*executor)->cache().shape();
  o.scheduler.window = options.kv_cache.free_behind_window ? shape.window : 0;
  o.scheduler.local_window = shape.local_blocks > 0 ? shape.local_window : 0;
  // The warm-up ran here; steps run on the engine's thread from now on.
  kernels::ReleaseCpuThreadsHere();
  return std::unique_ptr<Engine>(new Engine(model, tokenizer, o, std::move(*executor), std::move(draft), channel));
}

absl::Status RunEngineWorker(CausalLm& model, const EngineOptions& options, ControlChannel& channel) {
  if (channel.world().is_leader()) {
    return absl::InvalidArgumentError("rank 0 runs the engine; workers are ranks > 0");
  }
  auto executor = CreateStepExecutor(model, options, &channel);
  if (!executor.ok()) return executor.status();
  return RunTensorParallelWorker(**executor, channel);
}

Engine::Engine(CausalLm& model, const Tokenizer* tokenizer, const EngineOptions& options,
               std::unique_ptr<StepExecutor> executor, std::unique_ptr<Drafter> draft, ControlChannel* channel)
    : model_(model), tokenizer_(tokenizer), options_(options), executor_(std::move(executor)),
      draft_(std::move(draft)), channel_(channel),
      cache_(executor_->cache().shape(), options.scheduler.window, options.prefix_caching,
             options.state_checkpoint_interval),
      features_(options.vision_cache_bytes) {
  const KvCacheShape& shape = executor_->cache().shape();
  stats_.max_running = options.scheduler.max_batch;
  stats_.kv_bytes_total = shape.bytes();
  stats_.kv_tokens_total = shape.tokens();
  stats_.kv_bytes_per_token = shape.bytes_per_token();
  stats_.state_slots = shape.state_slots;
  stats_.state_slot_bytes = shape.bytes_per_state_slot();
  metrics_.kv_bytes_total.Set(static_cast<double>(shape.bytes()));
  metrics_.kv_bytes_per_token.Set(static_cast<double>(shape.bytes_per_token()));
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Shutdown(absl::ZeroDuration()); }

absl::Status Engine::Validate(const Request& r) const {
  const ModelInfo& config = model_.info();
  auto bad = [](absl::string_view field, auto&&... detail) {
    return FieldError(field, absl::StrCat(detail...));
  };
  if (r.prompt.empty()) return bad("prompt", "is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= config.vocab_size) {
      return bad("prompt", "token id ", r.prompt[i], " at index ", i,
                 " is outside the vocabulary (", config.vocab_size, ")");
    }
  }
  if (!r.images.empty()) {
    if (options_.vision == nullptr) {
      return bad("images", "this model takes no images (it has no vision encoder Flover runs)");
    }
    if (!r.given_rows.empty()) return bad("images", "a request gives images or given_rows, not both");
    const ImageEncoderInfo& v = options_.vision->encoder_info();
    int64_t tiles = 0, rows = 0;
    std::vector<int> rows_of;
    for (size_t i = 0; i < r.images.size(); ++i) {
      if (absl::Status st = options_.vision->CheckImage(r.images[i]); !st.ok()) {
        return bad("images", "image ", i, " ", st.message());
      }
      tiles += r.images[i].num_tiles;
      rows_of.push_back(options_.vision->RowsOf(r.images[i]));
      rows += rows_of.back();
    }
    if (tiles > options_.max_image_tiles) {
      return bad("images", "the images make ", tiles, " tiles; at most ", options_.max_image_tiles, " are taken");
    }
    const int64_t slots = std::count(r.prompt.begin(), r.prompt.end(), v.image_token);
    if (slots != rows) {
      return bad("images", "the prompt holds ", slots, " image tokens (id ", v.image_token, ") for images of ", rows,
                 " rows");
    }
    if (v.grid_positions || v.bidirectional) {
      // An image on a grid stands whole; one attended both ways, a run a
      // tile (Gemma 3's image, then its pan-and-scan crops).
      std::vector<int> runs;
      for (size_t i = 0; i < rows_of.size(); ++i) {
        const int tiles = v.bidirectional ? std::max(1, r.images[i].num_tiles) : 1;
        runs.insert(runs.end(), tiles, rows_of[i] / tiles);
      }
      if (absl::Status st = CheckImageRuns(r.prompt, runs, v.image_token); !st.ok()) {
        return bad("images", st.message());
      }
    }
    for (size_t i = 0; v.bidirectional && i < rows_of.size(); ++i) {
      const int rows = rows_of[i] / std::max(1, r.images[i].num_tiles);
      if (rows > options_.scheduler.max_tokens_per_step) {
        return bad("images", "image ", i, " takes ", rows, " rows, which attend to each other both ways and "
                   "run in one step, but a step takes at most ", options_.scheduler.max_tokens_per_step,
                   " (max_tokens_per_step)");
      }
    }
  }
  int64_t next = 0;
  for (size_t i = 0; i < r.given_rows.size(); ++i) {
    const GivenPromptRows& g = r.given_rows[i];
    if (g.count < 1 || g.position < next || int64_t{g.position} + g.count > static_cast<int64_t>(r.prompt.size())) {
      return bad("given_rows", "span ", i, " (prompt rows ", g.position, "..", int64_t{g.position} + g.count - 1,
                 ") is empty, out of order or outside the prompt's ", r.prompt.size(), " tokens");
    }
    next = int64_t{g.position} + g.count;
    const int layers = options_.vision != nullptr ? options_.vision->encoder_info().given_layers : 0;
    if (g.layers < 0 || g.layers > layers) {
      return bad("given_rows", "span ", i, " carries additions after ", g.layers, " layers; the model takes ",
                 layers);
    }
    if (g.grid_h < 0 || g.grid_w < 0 || (g.grid_h > 0) != (g.grid_w > 0) ||
        (g.grid_h > 0 && int64_t{g.grid_h} * g.grid_w != g.count)) {
      return bad("given_rows", "span ", i, "'s grid of ", g.grid_h, " x ", g.grid_w, " is not its ", g.count,
                 " rows");
    }
    if (g.grid_h > 0 && (options_.vision == nullptr || !options_.vision->encoder_info().grid_positions)) {
      return bad("given_rows", "span ", i, " has a grid, but this model's rows take no grid positions");
    }
    const size_t want = static_cast<size_t>(1 + g.layers) * g.count * config.hidden;
    if (g.values == nullptr || g.values->size() != want) {
      return bad("given_rows", "span ", i, " needs ", g.layers > 0 ? absl::StrCat(1 + g.layers, " x ") : "", g.count,
                 " x ", config.hidden, " values, got ", g.values == nullptr ? 0 : g.values->size());
    }
    for (float v : *g.values) {
      if (!std::isfinite(v)) return bad("given_rows", "span ", i, " holds a value that is not finite");
    }
    if (g.whole && g.count > options_.scheduler.max_tokens_per_step) {
      return bad("given_rows", "span ", i, " of ", g.count, " rows is given whole, but a step takes at most ",
                 options_.scheduler.max_tokens_per_step, " (max_tokens_per_step)");
    }
  }
  if (options_.embedding_only && !PromptOnly(r)) {
    return bad("model", "is an embedding model (its files name a pooling): it answers /v1/embeddings (gRPC Embed), "
                        "not generation");
  }
  if (r.embed.has_value()) {
    if (!options_.embeddings) {
      return FieldError("input", "this server does not serve embeddings (start it with --embeddings)",
                        absl::StatusCode::kFailedPrecondition);
    }
    if (r.embed_dims < 0 || r.embed_dims > config.hidden) {
      return bad("dimensions", "must be in [1, ", config.hidden, "] (the model's hidden size), got ", r.embed_dims);
    }
    if (r.constraint != nullptr || r.return_logprobs) {
      return bad("input", "an embedding request generates nothing: no constraint, no logprobs");
    }
  }
  if (!r.score_tokens.empty()) {
    if (r.embed.has_value()) return bad("score_tokens", "a request embeds or scores, not both");
    if (r.score_tokens.size() > static_cast<size_t>(kMaxScoreTokens)) {
      return bad("score_tokens", "at most ", kMaxScoreTokens, ", got ", r.score_tokens.size());
    }
    for (int32_t id : r.score_tokens) {
      if (id < 0 || id >= config.vocab_size) return bad("score_tokens", "token id ", id, " is outside the vocabulary");
    }
    if (r.constraint != nullptr) return bad("score_tokens", "a scoring request generates nothing: no constraint");
  }
  if (PromptOnly(r) && static_cast<int64_t>(r.prompt.size()) >= options_.max_seq_len) {
    return bad("prompt", "has ", r.prompt.size(), " tokens; at most ", options_.max_seq_len - 1,
               " fit (max_seq_len ", options_.max_seq_len, ")");
  }
  const StopConditions& stop = r.stop;
  if (stop.max_new_tokens < 1 || stop.max_new_tokens > options_.max_new_tokens_limit) {
    return bad("max_new_tokens", "must be in [1, ", options_.max_new_tokens_limit, "], got ",
               stop.max_new_tokens);
  }
  const int64_t total = int64_t{static_cast<int64_t>(r.prompt.size())} + stop.max_new_tokens;
  if (total > options_.max_seq_len) {
    return bad("max_new_tokens", "prompt (", r.prompt.size(), " tokens) + max_new_tokens (",
               stop.max_new_tokens, ") exceeds max_seq_len (", options_.max_seq_len, ")");
  }
  if (const int blocks = cache_.BlocksToRun(total); blocks > cache_.num_blocks()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt (%d tokens) + max_new_tokens (%d) needs %d KV blocks of %d positions (%.1f MiB) "
        "but the whole KV cache has %d (%.1f MiB): it cannot run even alone; send less, or start "
        "the server with a larger --kv_cache_memory",
        r.prompt.size(), stop.max_new_tokens, blocks, KvCacheShape::kBlockSize,
        blocks * cache_.bytes_per_block() / 1048576.0, cache_.num_blocks(),
        cache_.num_blocks() * cache_.bytes_per_block() / 1048576.0));
  }
  if (cache_.LocalBlocksToRun(total) > cache_.num_local_blocks()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt (%d tokens) + max_new_tokens (%d) needs %d of the local layers' KV blocks (their window of "
        "%d positions) but the cache has %d: it cannot run even alone; start the server with a larger "
        "--kv_cache_memory",
        r.prompt.size(), stop.max_new_tokens, cache_.LocalBlocksToRun(total), cache_.local_window(),
        cache_.num_local_blocks()));
  }
  if (absl::Status st = ValidateSamplingParams(r.sampling); !st.ok()) return st;
  for (const auto& [id, bias] : r.sampling.logit_bias) {
    if (id >= model_.info().vocab_size) {
      return bad("logit_bias", "token id ", id, " is outside the vocabulary (", model_.info().vocab_size, ")");
    }
  }
  if (r.constraint != nullptr && r.constraint->vocab_size() != model_.info().vocab_size) {
    return bad("constraint", "compiled for a vocabulary of ", r.constraint->vocab_size(),
               " tokens; the model has ", model_.info().vocab_size);
  }
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs) {
    return bad("top_logprobs", "must be in [0, ", kMaxTopLogprobs, "], got ", r.top_logprobs);
  }
  // Token ids that end generation: a bounded list, each in the vocabulary.
  for (const auto& [field, ids] : {std::pair{"stop_token_ids", &stop.stop_token_ids},
                                   std::pair{"end_of_turn_ids", &stop.end_of_turn_ids}}) {
    if (ids->size() > kMaxStopTokenIds) {
      return bad(field, "at most ", kMaxStopTokenIds, " ids, got ", ids->size());
    }
    for (int32_t t : *ids) {
      if (t < 0 || t >= config.vocab_size) {
        return bad(field, t, " is outside the vocabulary (", config.vocab_size, ")");
      }
    }
  }
  if (!stop.stop_strings.empty() && tokenizer_ == nullptr) {
    return bad("stop_strings", "the model has no tokenizer");
  }
  if (stop.stop_strings.size() > kMaxStopStrings) {
    return bad("stop_strings", "at most ", kMaxStopStrings, " strings, got ", stop.stop_strings.size());
  }
  for (const std::string& s : stop.stop_strings) {
    if (s.empty()) return bad("stop_strings", "must not contain an empty string");
    if (s.size() > kMaxStopStringBytes) {
      return bad("stop_strings", "each at most ", kMaxStopStringBytes, " bytes, got one of ", s.size());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestId> Engine::Submit(Request request, std::shared_ptr<TokenSink> sink) {
  absl::StatusOr<RequestId> id = Queue(std::move(request), std::move(sink));
  if (!id.ok()) metrics_.CountError(id.status().code());
  return id;
}

int Engine::max_context() const { return cache_.MaxContext(options_.max_seq_len); }

void Engine::RecordKvUseLocked() {
  stats_.kv_bytes_in_use = cache_.bytes_in_use();
  stats_.kv_bytes_peak = std::max(stats_.kv_bytes_peak, stats_.kv_bytes_in_use);
  stats_.kv_bytes_cached = cache_.bytes_cached();
}

void Engine::PublishOccupancyLocked() {
  metrics_.waiting.Set(stats_.queued);
  metrics_.running.Set(stats_.active);
  metrics_.kv_bytes_in_use.Set(static_cast<double>(stats_.kv_bytes_in_use));
  metrics_.kv_bytes_cached.Set(static_cast<double>(stats_.kv_bytes_cached));
}

absl::StatusOr<RequestId> Engine::Queue(Request request, std::shared_ptr<TokenSink> sink) {
  if (sink == nullptr) return FieldError("sink", "is null");
  // A prompt-only request generates nothing: one position of room, as a
  // request of one token has (its max_new_tokens is not its client's).
  if (PromptOnly(request)) request.stop.max_new_tokens = 1;
  if (absl::Status st = Validate(request); !st.ok()) return st;
  if (PromptOnly(request)) request.speculative = false;  // nothing to draft
  // A constraint works out its first mask here, on the caller's thread.
  std::unique_ptr<ConstraintState> constraint =
      request.constraint != nullptr ? request.constraint->Start() : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (!fatal_.ok()) return absl::UnavailableError(absl::StrCat("the engine failed: ", fatal_.message()));
  if (!accepting_) return absl::UnavailableError("the engine is shutting down");
  if (stats_.queued >= options_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the queue is full (", options_.max_queue, " requests waiting); retry later"));
  }
  const RequestId id = next_id_++;
  auto seq = std::make_unique<Sequence>(id, std::move(request), std::move(sink), Now());
  if (tokenizer_ != nullptr) {
    seq->observers.push_back(std::make_unique<TextOutput>(tokenizer_->NewTextStream(),
                                                          seq->request.stop.stop_strings));
  }
  if (seq->request.constraint != nullptr) {
    seq->constraint = std::move(constraint);
    seq->sampler.AddProcessor(
        std::make_unique<ConstraintMask>(seq->constraint.get(),
                                         EosLikeIds(model_.info(), seq->request.stop)),
        /*masks=*/true);
    seq->observers.push_back(std::make_unique<ConstraintObserver>(seq->constraint.get(), &seq->constraint_ahead));
  }
  incoming_.push_back(std::move(seq));
  live_ids_.insert(id);
  ++stats_.queued;
  metrics_.submitted.Increment();
  PublishOccupancyLocked();
  cv_.notify_all();
  return id;
}

absl::Status Engine::Cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_ids_.contains(id)) {
    return absl::NotFoundError(absl::StrCat("request ", id, " is not queued or running"));
  }
  cancels_.insert(id);
  cv_.notify_all();
  return absl::OkStatus();
}

EngineStats Engine::Stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;  // occupancy
  }
  // The running totals are the metrics' counters (exact integers in a double).
  auto count = [](const prometheus::Counter& c) { return static_cast<int64_t>(c.Value()); };
  s.submitted = count(metrics_.submitted);
  s.steps = count(metrics_.steps);
  s.prompt_tokens = count(metrics_.prompt_tokens);
  s.generated_tokens = count(metrics_.generated_tokens);
  s.prefix_query_tokens = count(metrics_.prefix_query_tokens);
  s.prefix_hit_tokens = count(metrics_.prefix_hit_tokens);
  s.preemptions = count(metrics_.preemptions);
  s.draft_tokens = count(metrics_.draft_tokens);
  s.accepted_tokens = count(metrics_.accepted_tokens);
  for (int r = 0; r < kNumFinishReasons; ++r) s.finished[r] = count(metrics_.finished[r]);
  return s;
}

bool Engine::Accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_;
}

absl::Status Engine::FatalError() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

void Engine::Fail(const absl::Status& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fatal_ = error;
    accepting_ = false;
  }
  for (auto& s : active_) Finish(*s, FinishReason::kError, error);
  for (auto& s : queue_) Finish(*s, FinishReason::kError, error);
  for (auto& s : encoding_) Finish(*s, FinishReason::kError, error);
  active_.clear();
  queue_.clear();
  encoding_.clear();
}

void Engine::Shutdown(absl::Duration drain_timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  const absl::Time until = absl::Now() + drain_timeout;
  while (!stop_ && (stats_.queued > 0 || stats_.active > 0) && absl::Now() < until) {
    cv_.wait_for(lock, absl::ToChronoNanoseconds(std::min(until - absl::Now(), absl::Milliseconds(50))));
  }
  stop_ = true;
  cv_.notify_all();
  lock.unlock();
  if (thread_.joinable()) thread_.join();
}

void Engine::Finish(Sequence& seq, FinishReason reason, absl::Status error, std::vector<float> embedding,
                    std::vector<float> logits) {
  if (seq.finished) return;
  seq.finished = true;
  FinishEvent ev;
  ev.reason = reason;
  ev.embedding = std::move(embedding);
  ev.logits = std::move(logits);
  ev.usage = {static_cast<int>(seq.request.prompt.size()), seq.generated};
  for (const auto& observer : seq.observers) observer->OnFinish(ev);
  ev.error = std::move(error);
  const absl::Time now = Now();
  // Counted before the sink hears of it, as the stats below are.
  metrics_.finished[static_cast<int>(reason)].Increment();
  metrics_.e2e_latency.Observe(absl::ToDoubleSeconds(now - seq.arrival));
  if (seq.generated >= 2) {
    metrics_.time_per_output_token.Observe(
        absl::ToDoubleSeconds(seq.last_token - seq.first_token) / (seq.generated - 1));
  }
  if (reason == FinishReason::kCancelled) metrics_.CountError(absl::StatusCode::kCancelled);
  if (reason == FinishReason::kDeadline) metrics_.CountError(absl::StatusCode::kDeadlineExceeded);
  if (reason == FinishReason::kError) {
    metrics_.CountError(ev.error.ok() ? absl::StatusCode::kInternal : ev.error.code());
  }
  {
    // Counted before the sink hears of it, so a client that saw its request
    // finish never reads stats that still hold it.
    if (seq.running) cache_.Release(seq.cache);
    if (draft_ != nullptr) draft_->Forget(seq.id);
    std::lock_guard<std::mutex> lock(mu_);
    live_ids_.erase(seq.id);
    if (seq.running) {
      --stats_.active;
    } else {
      --stats_.queued;
    }
    RecordKvUseLocked();
    PublishOccupancyLocked();
  }
  seq.sink->OnFinish(seq.id, ev);
}

void Engine::Emit(Sequence& seq, int32_t token, float logprob,
                  std::vector<std::pair<int32_t, float>> top, absl::Time now) {
  seq.tokens.push_back(token);
  if (!seq.keys.empty()) seq.keys.push_back(token);
  ++seq.generated;
  if (seq.generated == 1) {
    seq.first_token = now;
    metrics_.time_to_first_token.Observe(absl::ToDoubleSeconds(now - seq.arrival));
  } else {
    metrics_.inter_token_latency.Observe(absl::ToDoubleSeconds(now - seq.last_token));
  }
  seq.last_token = now;
  const StopConditions& stop = seq.request.stop;
  TokenEvent ev;
  ev.token = token;
  ev.logprob = logprob;
  ev.top_logprobs = std::move(top);

  std::optional<FinishReason> reason;
  const bool eos = EndsAsEos(model_.info(), stop, token);
  if (eos) {
    reason = FinishReason::kEos;
  } else if (std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) !=
             stop.stop_token_ids.end()) {
    reason = FinishReason::kStop;
  }
  for (const auto& observer : seq.observers) {
    const std::optional<FinishReason> r = observer->OnToken(token, eos, ev);
    if (r && !reason) reason = r;
  }
  if (!reason && seq.generated >= stop.max_new_tokens) reason = FinishReason::kLength;
  seq.sink->OnToken(seq.id, ev);
  if (reason) Finish(seq, *reason);
}

absl::Time Engine::NextWakeup() const {
  absl::Time t = absl::InfiniteFuture();
  for (const auto& s : queue_) t = std::min(t, s->request.deadline);
  for (const auto& s : active_) t = std::min(t, s->request.deadline);
  for (const auto& s : encoding_) t = std::min(t, s->request.deadline);
  if (!queue_.empty()) {
    const SchedulerOptions& o = options_.scheduler;
    if (o.policy == SchedulerPolicy::kDynamic) t = std::min(t, queue_.front()->arrival + o.batch_delay);
    if (o.policy == SchedulerPolicy::kStatic) t = std::min(t, queue_.front()->arrival + o.static_flush);
  }
  return t;
}

void Engine::Preempt(RequestId id) {
  auto it = std::find_if(active_.begin(), active_.end(), [id](const auto& s) { return s->id == id; });
  std::unique_ptr<Sequence> seq = std::move(*it);
  active_.erase(it);
  cache_.Release(seq->cache);
  seq->computed = 0;
  seq->drafts.clear();
  seq->running = false;
  queue_.push_front(std::move(seq));
  metrics_.preemptions.Increment();
  std::lock_guard<std::mutex> lock(mu_);
  --stats_.active;
  ++stats_.queued;
}

bool Engine::Plan(StepPlan* plan) {
  const absl::Time now = Now();
  const SchedulerOptions& o = options_.scheduler;
  // Only as many queued requests as could be admitted are looked up in the
  // prefix cache.
  // Blocks behind windows go back first: they may be what a queued prompt
  // finds cached.
  for (const auto& s : active_) cache_.GiveBackBehindWindow(s->computed, s->cache);
  std::vector<QueuedRequest> queued;
  const size_t candidates = std::min<size_t>(
      queue_.size(), static_cast<size_t>(std::max(0, o.max_batch - static_cast<int>(active_.size()))));
  queued.reserve(queue_.size());
  for (size_t i = 0; i < queue_.size(); ++i) {
    const Sequence& s = *queue_[i];
    const int known = static_cast<int>(s.tokens.size());
    int local_idle = 0;
    const KvBlockPool::Hit hit = i < candidates && s.takes_prefix() ? cache_.UsableHit(s.prefix_keys(), known - 1, &local_idle)
                                                                    : KvBlockPool::Hit{};
    queued.push_back({s.id, known, s.arrival, hit.tokens, hit.idle_blocks, local_idle,
                      cache_.NextCheckpoint(hit.tokens, known), s.whole});
  }
  std::vector<ActiveSequence> active;
  active.reserve(active_.size());
  for (const auto& s : active_) {
    active.push_back({s->id, s->computed, s->known(), static_cast<int>(s->cache.ids.size()),
                      cache_.Exclusive(s->cache), static_cast<int>(s->drafts.size()),
                      cache_.LocalExclusive(s->cache), cache_.NextCheckpoint(s->computed, s->known()),
                      s->whole});
  }
  *plan = Schedule(queued, active, cache_.free_blocks(), o, now, cache_.free_local_blocks(),
                   cache_.free_state_slots());
  if (plan->seqs.empty() && plan->admitted.empty() && plan->preempted.empty()) return false;

  // Preempted sequences go back to the queue's front, the oldest first.
  for (RequestId id : plan->preempted) Preempt(id);
  by_id_.clear();
  for (const auto& s : active_) by_id_[s->id] = s.get();
  const int64_t queries = cache_.query_tokens(), hits = cache_.hit_tokens();
  for (size_t i = 0; i < plan->admitted.size(); ++i) {
    // Admissions are a prefix of the queue, in order. Taking the cached
    // prefix before any block is allocated keeps eviction off it.
    std::unique_ptr<Sequence> seq = std::move(queue_.front());
    queue_.pop_front();
    seq->running = true;
    // The plan admitted no more than the free state slots, idle checkpoints
    // counted; one an admission before this one pinned since (its prefix
    // resumes from it) is not free after all, and the sequence waits for a
    // slot below.
    (void)cache_.AcquireState(seq->cache);
    seq->computed = seq->takes_prefix() ? cache_.TakeCachedPrefix(seq->prefix_keys(), seq->cache) : 0;
    // (Again, after a preemption: its rows are computed again.)
    if (seq->embedding()) seq->pooled.emplace(*seq->request.embed, model_.info().hidden);
    metrics_.queue_time.Observe(absl::ToDoubleSeconds(now - seq->arrival));
    by_id_[seq->id] = seq.get();
    active_.push_back(std::move(seq));
  }
  metrics_.prefix_query_tokens.Add(static_cast<double>(cache_.query_tokens() - queries));
  metrics_.prefix_hit_tokens.Add(static_cast<double>(cache_.hit_tokens() - hits));

  // Blocks for every scheduled sequence's positions. The plan counted on
  // them; a sequence the pool cannot serve after all (not expected) sits
  // this step out.
  std::vector<ScheduledSequence> runs;
  step_.batch.Clear();
  // Prefix checkpoints of recurrent state made after the last step.
  step_.batch.state_copies = cache_.TakePendingCopies();
  for (const ScheduledSequence& p : plan->seqs) {
    Sequence& s = *by_id_[p.id];
    // A sequence with recurrent state and no slot yet sits the step out
    // until one frees (a running sequence's, or an idle checkpoint's).
    if (!cache_.AcquireState(s.cache)) continue;
    const int need = KvCacheShape::BlocksFor(p.pos + p.len) - static_cast<int>(s.cache.ids.size());
    if (p.pos != s.computed || !cache_.Allocate(need, s.cache)) continue;
    runs.push_back(p);
    // With drafts (in decode, so the chunk starts at the last real token),
    // every row's logits: each says whether the next draft stands.
    // Its known tokens from p.pos: accepted ones, then drafts.
    rows_.clear();
    for (int i = p.pos; i < p.pos + p.len; ++i) {
      rows_.push_back(i < static_cast<int>(s.tokens.size()) ? s.tokens[i] : s.drafts[i - s.tokens.size()]);
    }
    const int first_row = step_.batch.num_rows();
    step_.batch.AddSequence(s.cache.ids, s.cache.local_ids, p.pos, rows_, s.drafts.empty() ? 1 : p.len);
    // Given prompt rows within the chunk, with their additions after the
    // first layers.
    bool grid = false;
    for (const GivenPromptRows& g : s.request.given_rows) {
      grid |= g.grid_h > 0;
      const int from = std::max(g.position, p.pos), to = std::min(g.position + g.count, p.pos + p.len);
      if (from >= to) continue;
      const size_t C = static_cast<size_t>(model_.info().hidden), skip = (from - g.position) * C;
      step_.batch.GiveRows(first_row + (from - p.pos), absl::MakeConstSpan(g.values->data() + skip, (to - from) * C),
                           model_.info().hidden);
      for (int l = 0; l < g.layers; ++l) {
        const float* layer = g.values->data() + static_cast<size_t>(l + 1) * g.count * C;
        step_.batch.AddToGivenRows(l, absl::MakeConstSpan(layer + skip, (to - from) * C));
      }
      // A span given whole is in the chunk to its end (the scheduler's
      // WholeSpan): each of its rows sees all of it.
      if (g.whole) step_.batch.AttendTo(first_row + (from - p.pos), to - from, g.position + g.count - 1);
    }
    // An image's rows on its grid, and every row after it, at multimodal
    // rotary positions.
    if (grid) {
      for (int i = 0; i < p.len; ++i) {
        const MropeRow m = MropePosition(s.request.given_rows, p.pos + i);
        step_.batch.SetRopePositions(first_row + i, m.t, m.h, m.w);
      }
    }
    if (cache_.has_state()) step_.batch.states.push_back(cache_.StepState(s.cache, p.pos, !s.drafts.empty()));
  }
  plan->seqs = std::move(runs);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.queued -= static_cast<int>(plan->admitted.size());
  stats_.active += static_cast<int>(plan->admitted.size());
  RecordKvUseLocked();
  PublishOccupancyLocked();
  return true;
}

bool Engine::PlainGreedyStep(const StepPlan& plan) const {
  for (const ScheduledSequence& p : plan.seqs) {
    const Sequence& s = *by_id_.at(p.id);
    if (!s.sampler.PlainGreedy() || s.request.return_logprobs || s.scoring()) return false;
  }
  return !plan.seqs.empty();
}

void Engine::ProcessOutputs(const StepPlan& plan, const StepResult& result, absl::Time now) {
  const absl::Span<float> logits = result.logits;
  const absl::Span<const int32_t> best = result.best;
  int64_t prompt_rows = 0;
  // Sequences whose known tokens are now all computed sample (the others
  // were prompt chunks, or a preempted sequence's tokens computed again),
  // and so do those that verify drafts, from each of their logit rows.
  struct Sampling {
    int seq;        // in plan.seqs
    int first_row;  // its first row of logits
    int rows;       // its rows of logits
  };
  std::vector<Sampling> sampling;
  std::vector<Sequence*> prompts_done;  // embedding and scoring requests whose prompts are computed
  int logit_row = 0;
  size_t hidden_row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Sequence& s = *by_id_[plan.seqs[i].id];
    const ScheduledSequence& p = plan.seqs[i];
    const int rows = step_.batch.logit_rows_of(i);
    logit_row += rows;
    hidden_row += p.len;
    prompt_rows += std::max(0, std::min<int>(p.pos + p.len, s.request.prompt.size()) - p.pos);
    if (s.finished) continue;
    if (s.prompt_only()) {
      if (s.embedding()) PoolRows(s, p, hidden_row - p.len);
      s.computed += p.len;
      cache_.StepDone(s.cache);
      if (s.takes_prefix()) cache_.Register(s.prefix_keys(), s.computed, s.cache);
      if (s.computed == static_cast<int>(s.tokens.size())) {
        if (s.scoring()) {
          // Its last logit row is the prompt's last position.
          const size_t V = static_cast<size_t>(model_.info().vocab_size);
          const float* row = logits.data() + static_cast<size_t>(logit_row - 1) * V;
          for (int32_t id : s.request.score_tokens) s.scores.push_back(row[id]);
        }
        prompts_done.push_back(&s);
      }
      continue;
    }
    // Where this chunk was to leave a checkpoint of recurrent state.
    const int checkpoint = cache_.NextCheckpoint(s.computed, s.known());
    s.computed += p.len;
    cache_.StepDone(s.cache);
    if (!s.drafts.empty()) {
      // Verified below; its blocks are registered once it is known which
      // of its tokens stand.
      sampling.push_back({static_cast<int>(i), logit_row - rows, rows});
      continue;
    }
    cache_.Register(s.prefix_keys(), s.computed, s.cache);
    if (checkpoint > 0 && s.computed == checkpoint) cache_.Checkpoint(s.prefix_keys(), s.computed, s.cache);
    if (s.computed == static_cast<int>(s.tokens.size())) {
      sampling.push_back({static_cast<int>(i), logit_row - rows, rows});
    }
  }
  // Each sequence samples from its own generator, so they can draw in
  // parallel; tokens are then emitted in order on this thread. A sequence
  // with drafts samples row by row what it would have sampled one step at a
  // time (SampleAndAccept), so its tokens, draws and logprobs are those it
  // would have had without the drafts.
  const int V = model_.info().vocab_size;
  const int n = static_cast<int>(sampling.size());
  sampled_.resize(n);
  histories_.resize(n);
  kernels::UseCpuThreadsHere();  // --threads, on this thread too
  const absl::Time sampling_start = Now();
#pragma omp parallel for schedule(dynamic) if (n > 1)
  for (int k = 0; k < n; ++k) {
    Sequence& s = *by_id_[plan.seqs[sampling[k].seq].id];
    const StopConditions& stop = s.request.stop;
    SampleAndAccept({&s.sampler, s.tokens, s.drafts, s.constraint.get(), s.request.return_logprobs,
                     s.request.top_logprobs,
                     [&](int32_t token) { return EndsAsEos(model_.info(), stop, token); }},
                    {logits, best, V, sampling[k].first_row, sampling[k].rows}, &histories_[k], &sampled_[k]);
  }
  int generated = 0, drafts = 0, accepted = 0;
  for (int k = 0; k < n; ++k) {
    Sequence& s = *by_id_[plan.seqs[sampling[k].seq].id];
    const SampledTokens& out = sampled_[k];
    if (!s.drafts.empty()) {
      // The drafts taken are computed now; the rest are dropped, and the
      // cache manager says where the sequence's computed tokens end.
      const int verified = sampling[k].rows - 1, taken = out.accepted();
      drafts += verified;
      accepted += taken;
      if (!s.forced_drafts) s.pacer->Verified(verified, taken);
      s.computed = cache_.SettleDrafts(s.cache, static_cast<int>(s.tokens.size()), verified, taken);
      s.drafts.clear();
      s.forced_drafts = false;
    }
    generated += static_cast<int>(out.tokens.size());
  }
  // The step is counted before any sink hears of its tokens, so a client
  // that saw its request finish never reads counts without its last step.
  metrics_.steps.Increment();
  metrics_.step_sampling_seconds.Observe(absl::ToDoubleSeconds(Now() - sampling_start));
  metrics_.step_rows.Observe(step_.batch.num_rows());
  metrics_.step_prompt_tokens.Observe(static_cast<double>(prompt_rows));
  metrics_.prompt_tokens.Add(static_cast<double>(prompt_rows));
  metrics_.generated_tokens.Add(generated);
  metrics_.draft_tokens.Add(drafts);
  metrics_.accepted_tokens.Add(accepted);
  for (int k = 0; k < n; ++k) {
    Sequence& s = *by_id_[plan.seqs[sampling[k].seq].id];
    SampledTokens& out = sampled_[k];
    for (size_t j = 0; j < out.tokens.size() && !s.finished; ++j) {
      s.constraint_ahead = static_cast<int>(out.tokens.size() - 1 - j);
      Emit(s, out.tokens[j], out.logprobs[j], std::move(out.top_logprobs[j]), now);
    }
    s.constraint_ahead = 0;
    // Blocks now full of computed tokens that stand go to the prefix cache.
    if (!s.finished) cache_.Register(s.prefix_keys(), s.computed, s.cache);
  }
  for (Sequence* s : prompts_done) {
    if (s->scoring()) {
      Finish(*s, FinishReason::kStop, absl::OkStatus(), {}, std::move(s->scores));
      continue;
    }
    auto vector = s->pooled->Finish(s->request.embed_dims);
    if (!vector.ok()) {
      Finish(*s, FinishReason::kError, vector.status());
    } else {
      Finish(*s, FinishReason::kStop, absl::OkStatus(), std::move(*vector));
    }
  }
  TellDrafter(plan);
  EraseFinished(active_);
  if (options_.speculative.mode != SpeculativeMode::kOff) ProposeDrafts();
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void Engine::PoolRows(Sequence& s, const ScheduledSequence& p, size_t first_row) {
  const absl::Span<const float> hidden = model_.FinalHidden();
  const size_t C = static_cast<size_t>(model_.info().hidden);
  if (hidden.size() < (first_row + p.len) * C) return;  // none kept: Finish says no rows
  s.pooled->Add(hidden.subspan(first_row * C, p.len * C), p.pos, p.len, static_cast<int>(s.tokens.size()));
}

void Engine::TellDrafter(const StepPlan& plan) {
  if (draft_ == nullptr) return;
  // Each sequence's rows that stand, with the model's hidden rows of them
  // (none unless the drafter asked the model to keep them).
  const absl::Span<const float> hidden = model_.FinalHidden();
  const size_t C = static_cast<size_t>(model_.info().hidden);
  size_t row = 0;
  for (const ScheduledSequence& p : plan.seqs) {
    const size_t first = row;
    row += p.len;
    Sequence& s = *by_id_[p.id];
    // A request that opted out of speculation costs the drafter nothing.
    if (s.finished || !s.request.speculative) continue;
    const int standing = std::clamp(s.computed - p.pos, 0, p.len);
    draft_->Computed(s.id, p.pos, standing, hidden.empty() ? hidden : hidden.subspan(first * C, standing * C),
                     s.tokens);
  }
  if (absl::Status st = draft_->StepDone(); !st.ok()) DrafterFailed(st);
}

void Engine::DrafterFailed(const absl::Status& st) {
  // Drafts are only ever guesses, so the requests go on without them (and
  // without the drafter from now on).
  std::fprintf(stderr, "engine: the %s drafter failed, speculation is off from now: %s\n",
               std::string(SpeculativeModeName(options_.speculative.mode)).c_str(),
               std::string(st.message()).c_str());
  draft_.reset();
}

void Engine::ProposeDrafts() {
  const SpeculativeOptions& o = options_.speculative;
  // Each decoding sequence takes a row; drafts get what is left of
  // max_step_rows, oldest sequences first.
  int decoding = 0;
  for (const auto& s : active_) decoding += s->computed == static_cast<int>(s->tokens.size()) - 1;
  int rows = o.max_step_rows - decoding;
  // A draft model's tokens cost a forward of it each (and a new sequence's
  // prompt one more), taken or not: it drafts only while every decoding
  // sequence could have a whole draft within the step's rows, where a step
  // is bound by reading the weights (batch 1 with the defaults; measured:
  // at 8 and 32 concurrent chats it cost 17-36% of the throughput).
  const bool draft_model_drafts = draft_ != nullptr && decoding * (1 + o.max_tokens) <= o.max_step_rows;
  // With a draft model, the sequences it drafts for and how many tokens each.
  std::vector<Sequence*> asked;
  std::vector<Drafter::Ask> asks;
  for (const auto& sp : active_) {
    if (rows <= 0) break;
    Sequence& s = *sp;
    if (!s.drafts.empty() || !s.request.speculative || s.computed != static_cast<int>(s.tokens.size()) - 1) {
      continue;
    }
    // With recurrent state, a verify step writes a second slot.
    if (!cache_.ReadyToVerify(s.cache)) continue;
    if (!s.pacer.has_value()) s.pacer.emplace(o.max_tokens);
    // Never past the last token the request may generate (which also keeps
    // every draft within the positions it was admitted for).
    const int room = s.request.stop.max_new_tokens - s.generated - 1;
    // Where a constraint fixes what comes next, its bytes are the draft,
    // as the tokenizer spells them (the model verifies the spelling), and
    // whatever the pacer says; else an n-gram's or the draft model's, when
    // the pacer allows.
    std::vector<int32_t> draft = ForcedDraft(s, std::min({o.max_tokens, room, rows}));
    s.forced_drafts = !draft.empty();
    if (draft.empty()) {
      if (!s.pacer->Drafts()) continue;
      const int length = std::min({s.pacer->length(), room, rows});
      if (length < 1) continue;
      if (o.mode == SpeculativeMode::kDraft || o.mode == SpeculativeMode::kMtp) {
        if (!draft_model_drafts) continue;  // too many decoding, or it failed earlier
        if (!draft_->Repays(s.id, s.tokens, room)) continue;  // its prompt unread, too few tokens left
        asked.push_back(&s);
        asks.push_back({s.id, s.tokens, length});
        rows -= length;  // at most; what it does not draft stays unused this step
        continue;
      }
      draft = NgramDraft(s.tokens, length, o.min_ngram, o.max_ngram);
    }
    rows -= static_cast<int>(draft.size());
    s.drafts = std::move(draft);
  }
  if (asks.empty()) return;
  absl::StatusOr<std::vector<std::vector<int32_t>>> drafts = draft_->Propose(asks, draft_->max_rows());
  if (!drafts.ok()) {
    DrafterFailed(drafts.status());
    return;
  }
  for (size_t i = 0; i < asked.size(); ++i) {
    Sequence& s = *asked[i];
    s.drafts = std::move((*drafts)[i]);
  }
}

std::vector<int32_t> Engine::ForcedDraft(Sequence& s, int max_tokens) const {
  if (s.constraint == nullptr || tokenizer_ == nullptr || max_tokens <= 0) return {};
  std::string forced = s.constraint->ForcedBytes();
  forced.resize(CompleteUtf8Prefix(forced));  // whole characters: the tokenizer takes valid text
  if (forced.empty()) return {};
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(forced, /*add_special_tokens=*/false);
  if (!ids.ok()) return {};
  if (static_cast<int>(ids->size()) > max_tokens) ids->resize(max_tokens);
  return *std::move(ids);
}

bool Engine::EncodeImages() {
  if (encoding_.empty()) return false;
  ImageEncoder& vision = *options_.vision;
  const ImageEncoderInfo& v = vision.encoder_info();
  int budget = std::max(1, options_.vision_tiles_per_step);
  while (!encoding_.empty() && budget > 0) {
    Sequence& s = *encoding_.front();
    const std::vector<PromptImage>& images = s.request.images;
    while (s.image_rows.size() < images.size() && budget > 0) {
      const PromptImage& im = images[s.image_rows.size()];
      if (s.partial_units == 0) {
        // Kept features of this key (a key names the pixels; features of
        // another size are not this image's, and are encoded afresh).
        const size_t want = static_cast<size_t>(1 + v.given_layers) * vision.RowsOf(im) * v.out_width;
        if (ImageFeatureCache::Rows kept = features_.Find(im.key); kept != nullptr && kept->size() == want) {
          s.image_rows.push_back(std::move(kept));
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.image_cache_hits;
          continue;
        }
      }
      // A few units (tiles, groups of blocks) a step.
      const int units = vision.UnitsOf(im);
      const int n = std::min(budget, units - s.partial_units);
      auto rows = vision.EncodeUnits(im, s.partial_units, n);
      if (!rows.ok()) {
        Finish(s, FinishReason::kError, rows.status());
        break;
      }
      s.partial.insert(s.partial.end(), rows->begin(), rows->end());
      s.partial_units += n;
      budget -= n;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.image_tiles_encoded += n;
      }
      if (s.partial_units < units) break;
      auto done = std::make_shared<const std::vector<float>>(std::move(s.partial));
      s.partial = {};
      s.partial_units = 0;
      s.image_rows.push_back(done);
      features_.Keep(im.key, std::move(done));
    }
    if (s.finished) {
      encoding_.pop_front();
      continue;
    }
    if (s.image_rows.size() < images.size()) break;
    // Every image encoded: the features to its image tokens.
    std::unique_ptr<Sequence> seq = std::move(encoding_.front());
    encoding_.pop_front();
    std::vector<int> rows_of;
    for (const PromptImage& im : images) rows_of.push_back(vision.RowsOf(im));
    seq->SetGivenRows(ImageGivenRows(seq->request.prompt, images, seq->image_rows, rows_of, v));
    seq->image_rows.clear();
    queue_.push_back(std::move(seq));
  }
  return true;
}

bool Engine::Step() {
  StepPlan plan;
  if (!Plan(&plan)) return false;
  const absl::Time start = Now();
  if (tensor_parallel()) {
    if (absl::Status st = BroadcastStep(*channel_, step_); !st.ok()) {
      Fail(st);
      return true;
    }
  }
  // A step of greedy sequences only needs each row's best token, which the
  // model picks where the logits are (on a GPU, only ids come back).
  const absl::StatusOr<StepResult> ran =
      executor_->Run(step_, PlainGreedyStep(plan) ? StepOutput::kBestTokens : StepOutput::kLogits);
  if (ran.ok()) {
    const absl::Time now = Now();
    metrics_.step_seconds.Observe(absl::ToDoubleSeconds(now - start));
    ProcessOutputs(plan, *ran, now);
  } else if (ran.status().code() == absl::StatusCode::kInvalidArgument) {
    // Not expected (requests and plans are validated), and refused before it
    // changed anything on any rank: fail this step's requests, keep serving.
    for (auto& s : active_) Finish(*s, FinishReason::kError, ran.status());
    EraseFinished(active_);
  } else {
    // A device fault or a failed collective: the cache or the ranks can no
    // longer be trusted, so nothing runs any more.
    Fail(ran.status());
  }
  return true;
}

void Engine::Loop() {
  while (true) {
    absl::flat_hash_set<RequestId> cancels;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_ && incoming_.empty() && cancels_.empty() && queue_.empty() &&
             active_.empty() && encoding_.empty()) {
        cv_.wait(lock);
      }
      for (auto& s : incoming_) (s->request.images.empty() ? queue_ : encoding_).push_back(std::move(s));
      incoming_.clear();
      cancels.swap(cancels_);
      stopping = stop_;
    }
    const absl::Time now = Now();
    auto expire = [&](Sequence& s) {
      if (stopping || cancels.contains(s.id)) {
        Finish(s, FinishReason::kCancelled);
      } else if (now >= s.request.deadline) {
        Finish(s, FinishReason::kDeadline);
      }
    };
    for (auto& s : queue_) expire(*s);
    for (auto& s : active_) expire(*s);
    for (auto& s : encoding_) expire(*s);
    EraseFinished(queue_);
    EraseFinished(active_);
    EraseFinished(encoding_);
    if (stopping) {
      if (tensor_parallel()) (void)BroadcastStop(*channel_);  // release the workers
      return;
    }
    const bool encoded = EncodeImages();
    if (!Step() && !encoded) {
      const absl::Time wake = NextWakeup();
      std::unique_lock<std::mutex> lock(mu_);
      if (incoming_.empty() && cancels_.empty() && !stop_) {
        if (wake == absl::InfiniteFuture()) {
          if (queue_.empty() && active_.empty() && encoding_.empty()) continue;  // the wait above handles it
          cv_.wait(lock);
        } else {
          cv_.wait_for(lock, absl::ToChronoNanoseconds(std::max(wake - Now(), absl::ZeroDuration())));
        }
      }
    }
  }
}

}  // namespace flover
