#include "server/flover_service.h"

#include "chat/tool_calls.h"

#include <chrono>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "chat/reply_reader.h"
#include "chat/tool_calls.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // SerializationTraits for messages
#include "server/embeddings_api.h"
#include "server/request_session.h"
#include "util/field_error.h"
#include "server/status_util.h"

namespace flover::server {
namespace {

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return v1::LENGTH;
    case FinishReason::kStop: return v1::STOP;
    case FinishReason::kEos: return v1::EOS;
    case FinishReason::kCancelled: return v1::CANCELLED;
    case FinishReason::kDeadline: return v1::DEADLINE;
    case FinishReason::kError: return v1::ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

absl::Time ToAbslTime(std::chrono::system_clock::time_point t) {
  if (t == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(t);
}

// One Generate call. Engine events (engine thread) and gRPC callbacks (gRPC
// threads) meet under `mu_`: tokens that arrive while a write is in flight
// are merged into the next message, so a slow client costs one buffered
// message, never a blocked engine.
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                              public std::enable_shared_from_this<GenerateReactor> {
 public:
  // The reactor is owned by a shared_ptr held by itself until OnDone and by
  // the engine's sink until the request finishes, whichever is later.
  static GenerateReactor* Start(const ServingContext& serving, const ApiKeys* keys,
                                grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer& request) {
    auto reactor = std::shared_ptr<GenerateReactor>(new GenerateReactor(serving.engine));
    reactor->self_ = reactor;
    reactor->Submit(serving, keys, context, request);
    return reactor.get();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    // A failed write means the client is gone: nothing more is sent, but the
    // call must still be finished once the engine lets go of the request
    // (OnCancel has asked it to), or the server could never shut down.
    if (!ok) broken_ = true;
    WriteLocked();
  }

  void OnCancel() override {
    RequestId id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = id_;
    }
    if (id != 0) (void)engine_.Cancel(id);  // NotFound if it already finished
  }

  void OnDone() override {
    std::shared_ptr<GenerateReactor> keep;  // released after the lock is
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    keep = std::move(self_);  // the sink may hold a reference until the engine lets go
  }

 private:
  class Sink : public TokenSink {
   public:
    explicit Sink(std::shared_ptr<GenerateReactor> r) : r_(std::move(r)) {}
    void OnToken(RequestId, const TokenEvent& e) override { r_->OnToken(e); }
    void OnFinish(RequestId, const FinishEvent& e) override {
      r_->OnFinish(e);
      r_.reset();
    }

   private:
    std::shared_ptr<GenerateReactor> r_;
  };

  explicit GenerateReactor(Engine& engine) : engine_(engine) {}

  void Submit(const ServingContext& serving, const ApiKeys* keys,
              grpc::CallbackServerContext* context, const grpc::ByteBuffer& raw) {
    // Held across the submit so the engine's first callbacks wait until the
    // id is known.
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status st = Authenticate(keys, *context); !st.ok()) {
      Finish(ToGrpcStatus(CountRefusal(engine_, st)));
      return;
    }
    v1::GenerateRequest request;
    grpc::ByteBuffer bytes = raw;  // Deserialize consumes it; the copy shares the slices
    if (!grpc::SerializationTraits<v1::GenerateRequest>::Deserialize(&bytes, &request).ok()) {
      Finish(ToGrpcStatus(CountRefusal(engine_, absl::InvalidArgumentError(
          "request: not a valid flover.v1.GenerateRequest message (protobuf parse failed)"))));
      return;
    }
    request_id_ = request.request_id();
    with_logprobs_ = request.return_logprobs();
    ClientRequest client = FromProto(request);
    // With tools, the calls are read from the whole text at the end.
    if (serving.chat != nullptr && !client.tools.empty() && ToolChoiceOf(client) != ToolChoice::kNone) {
      tool_format_ = serving.chat->tool_format;
    }
    const ReasoningFormat reasoning = client.prompt == ClientRequest::Prompt::kMessages && serving.chat != nullptr
                                          ? serving.chat->reasoning
                                          : ReasoningFormat::kNone;
    auto submitted = SubmitRequest(serving, client, std::make_shared<Sink>(shared_from_this()),
                                   [context](Request& r) { r.deadline = ToAbslTime(context->deadline()); });
    if (!submitted.ok()) {
      Finish(ToGrpcStatus(submitted.status()));
      return;
    }
    id_ = submitted->id;
    if (request_id_.empty()) request_id_ = absl::StrCat(id_);
    if (reasoning != ReasoningFormat::kNone) {
      // The reasoning apart from the answer (as reasoning_content in the
      // OpenAI API); calls are read from the answer at the end. (mu_ is
      // held: the engine's first callbacks wait for it.)
      ReplyReader::Options o = ReplyOptions(serving, client, submitted->prompt, "", false);
      o.tools.reset();
      reader_ = std::make_unique<ReplyReader>(o);
    }
    // A cancel that arrived before the id existed found nothing to cancel.
    if (context->IsCancelled()) (void)engine_.Cancel(id_);
  }

  // Text of the reply into `pending_`: as it is, or split by the reader
  // (the answer's part into text and the calls' reading).
  void Read(const std::string& text, bool finish) {
    if (reader_ == nullptr) {
      pending_.mutable_text()->append(text);
      if (tool_format_.has_value()) all_text_ += text;
      return;
    }
    std::vector<ReplyReader::Event> events = reader_->Push(text);
    if (finish) {
      for (ReplyReader::Event& e : reader_->Finish()) events.push_back(std::move(e));
    }
    for (const ReplyReader::Event& e : events) {
      if (e.kind == ReplyReader::Event::kReasoning) {
        pending_.mutable_reasoning()->append(e.text);
      } else if (e.kind == ReplyReader::Event::kContent) {
        pending_.mutable_text()->append(e.text);
        if (tool_format_.has_value()) all_text_ += e.text;
      }
    }
  }

  void OnToken(const TokenEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.add_token_ids(static_cast<uint32_t>(e.token));
    Read(e.text, /*finish=*/false);
    if (with_logprobs_) pending_.add_logprobs(e.logprob);
    if (!e.top_logprobs.empty()) {
      v1::TopLogprobs* top = pending_.add_top_logprobs();
      for (const auto& [id, lp] : e.top_logprobs) {
        top->add_token_ids(static_cast<uint32_t>(id));
        top->add_logprobs(lp);
      }
    }
    has_pending_ = true;
    WriteLocked();
  }

  void OnFinish(const FinishEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    end_status_ = ToGrpcStatus(EndStatus(e));
    if (end_status_.ok()) {
      Read(e.text, /*finish=*/true);
      pending_.set_finish_reason(ToProto(e.reason));
      if (tool_format_.has_value()) {
        const ParsedReply reply = ParseToolCalls(*tool_format_, all_text_, absl::StrCat("call_", request_id_, "_"));
        for (const ToolCall& c : reply.calls) {
          v1::ToolCall* out = pending_.add_tool_calls();
          out->set_id(c.id);
          out->set_name(c.name);
          out->set_arguments(c.arguments);
        }
        if (!reply.calls.empty()) pending_.set_finish_reason(v1::TOOL_CALLS);
      }
      pending_.mutable_usage()->set_prompt_tokens(e.usage.prompt_tokens);
      pending_.mutable_usage()->set_generated_tokens(e.usage.generated_tokens);
      has_pending_ = true;
    } else {
      has_pending_ = false;  // nothing more is sent on a failed call
    }
    finished_ = true;
    WriteLocked();
  }

  // Starts the next write, or ends the call once everything is written.
  void WriteLocked() {
    if (writing_ || done_ || ended_) return;
    if (has_pending_ && !broken_) {
      pending_.set_request_id(request_id_);
      bool own = false;
      in_flight_.Clear();  // the previous write is done; Serialize needs an empty buffer
      const grpc::Status st =
          grpc::SerializationTraits<v1::GenerateResponse>::Serialize(pending_, &in_flight_, &own);
      pending_.Clear();
      has_pending_ = false;
      if (!st.ok()) {  // not expected: a message the server built itself
        ended_ = true;
        if (!finished_ && id_ != 0) (void)engine_.Cancel(id_);  // nobody can receive the rest
        Finish(st);
        return;
      }
      writing_ = true;
      StartWrite(&in_flight_);
      return;
    }
    if (finished_) {
      ended_ = true;
      Finish(end_status_);
    }
  }

  Engine& engine_;
  std::shared_ptr<GenerateReactor> self_;
  std::mutex mu_;
  RequestId id_ = 0;
  std::string request_id_;
  bool with_logprobs_ = false;
  std::optional<ToolCallFormat> tool_format_;  // set: the reply's calls are read at its end
  std::string all_text_;                       // with tool_format_: the whole reply so far (its answer)
  std::unique_ptr<ReplyReader> reader_;        // messages with a reasoning parser: splits it off
  v1::GenerateResponse pending_;
  grpc::ByteBuffer in_flight_;  // the message being written, serialized
  bool has_pending_ = false;
  bool writing_ = false;
  bool broken_ = false;    // a write failed: the client is gone
  bool finished_ = false;  // the engine is done with the request
  bool ended_ = false;     // Finish() called
  bool done_ = false;      // OnDone() ran
  grpc::Status end_status_;
};

}  // namespace

FloverService::FloverService(ServingContext serving, ModelDescription model, const ApiKeys* keys)
    : serving_(std::move(serving)), engine_(serving_.engine), model_(std::move(model)), keys_(keys) {}

absl::Status Authenticate(const ApiKeys* keys, const grpc::CallbackServerContext& context) {
  if (keys == nullptr) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  return keys->Check(it == metadata.end() ? absl::string_view()
                                          : absl::string_view(it->second.data(), it->second.size()));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* FloverService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return GenerateReactor::Start(serving_, keys_, context, *request);
}

grpc::ServerUnaryReactor* FloverService::Embed(grpc::CallbackServerContext* context,
                                               const v1::EmbedRequest* request, v1::EmbedResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto refuse = [&](absl::Status st) {
    reactor->Finish(ToGrpcStatus(CountRefusal(engine_, std::move(st))));
    return reactor;
  };
  if (absl::Status st = Authenticate(keys_, *context); !st.ok()) return refuse(st);
  if (!serving_.pooling.has_value()) {
    return refuse(FieldError("texts", "this server does not serve embeddings (start it with --embeddings)",
                             absl::StatusCode::kFailedPrecondition));
  }
  if (request->texts_size() > 0 && request->token_ids_size() > 0) {
    return refuse(FieldError("token_ids", "send texts or token_ids, not both"));
  }
  const int n = request->texts_size() + request->token_ids_size();
  if (n == 0) return refuse(FieldError("texts", "no inputs: send texts or token_ids"));
  if (n > kMaxEmbeddingInputs) return refuse(FieldError("texts", absl::StrCat("at most ", kMaxEmbeddingInputs, " inputs, got ", n)));
  std::vector<std::vector<int32_t>> ids;
  for (const v1::TokenIds& t : request->token_ids()) ids.emplace_back(t.ids().begin(), t.ids().end());
  auto prompts = EmbeddingPrompts(serving_, {request->texts().begin(), request->texts().end()}, std::move(ids));
  if (!prompts.ok()) return refuse(prompts.status());
  uint32_t tokens = 0;
  for (const auto& p : *prompts) tokens += static_cast<uint32_t>(p.size());
  response->set_prompt_tokens(tokens);
  SubmitEmbeddings(engine_, std::move(*prompts), *serving_.pooling, static_cast<int>(request->dimensions()),
                   [reactor, response](absl::StatusOr<std::vector<std::vector<float>>> vectors) {
                     if (!vectors.ok()) return reactor->Finish(ToGrpcStatus(vectors.status()));
                     for (const std::vector<float>& v : *vectors) {
                       response->add_embeddings()->mutable_values()->Add(v.begin(), v.end());
                     }
                     reactor->Finish(grpc::Status::OK);
                   });
  return reactor;
}

grpc::ServerUnaryReactor* FloverService::GetModelInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetModelInfoRequest*,
                                                      v1::ModelInfo* info) {
  if (absl::Status st = Authenticate(keys_, *context); !st.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  const ModelInfo& c = engine_.model().info();
  const EngineOptions& o = engine_.options();
  info->set_model(model_.spec);
  info->set_served_model_name(model_.served_name);
  info->set_architecture(c.architecture);
  info->set_n_layer(c.n_layer);
  info->set_n_head(c.n_head);
  info->set_n_kv_head(c.n_kv_head);
  info->set_n_embd(c.hidden);
  info->set_vocab_size(c.vocab_size);
  info->set_max_positions(c.max_positions);
  info->set_dtype(model_.stored_dtype);
  info->set_matmul_dtype(model_.matmul_dtype);
  info->set_kv_dtype(model_.kv_dtype);
  info->set_tp_size(model_.tp_size);
  info->set_device(model_.device);
  info->set_device_name(model_.device_name);
  info->set_device_memory_bytes(model_.device_memory_bytes);
  info->set_has_tokenizer(serving_.tokenizer != nullptr);
  info->set_has_chat_template(serving_.chat != nullptr && serving_.chat->format != nullptr);
  info->set_max_seq_len(o.max_seq_len);
  info->set_max_batch(o.scheduler.max_batch);
  info->set_scheduler(std::string(SchedulerPolicyName(o.scheduler.policy)));
  info->set_prefix_caching(o.prefix_caching);
  info->set_kv_cache_tokens(engine_.Stats().kv_tokens_total);
  info->set_kv_cache_bytes_per_token(engine_.Stats().kv_bytes_per_token);
  info->set_eos_token_id(c.eos_token_ids.empty() ? -1 : c.eos_token_ids.front());
  for (int32_t id : c.eos_token_ids) info->add_eos_token_ids(id);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* FloverService::GetStats(grpc::CallbackServerContext* context,
                                                  const v1::GetStatsRequest*, v1::Stats* out) {
  if (absl::Status st = Authenticate(keys_, *context); !st.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  const EngineStats s = engine_.Stats();
  out->set_queue_length(s.queued);
  out->set_active_sequences(s.active);
  out->set_max_running(s.max_running);
  out->set_kv_bytes_in_use(s.kv_bytes_in_use);
  out->set_kv_bytes_total(s.kv_bytes_total);
  out->set_kv_bytes_cached(s.kv_bytes_cached);
  out->set_kv_bytes_peak(s.kv_bytes_peak);
  out->set_tokens_generated(s.generated_tokens);
  out->set_prompt_tokens(s.prompt_tokens);
  out->set_prefix_cache_query_tokens(s.prefix_query_tokens);
  out->set_prefix_cache_hit_tokens(s.prefix_hit_tokens);
  out->set_preemptions(s.preemptions);
  out->set_speculative_draft_tokens(s.draft_tokens);
  out->set_speculative_accepted_tokens(s.accepted_tokens);
  out->set_steps(s.steps);
  out->set_requests_submitted(s.submitted);
  for (int r = 0; r < kNumFinishReasons; ++r) {
    (*out->mutable_requests_finished())[std::string(FinishReasonName(static_cast<FinishReason>(r)))] =
        s.finished[r];
  }
  out->set_scheduler(std::string(SchedulerPolicyName(engine_.options().scheduler.policy)));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace flover::server
