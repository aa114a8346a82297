// What the gRPC and HTTP front ends share for one request, so they cannot
// drift: the conversion (request_convert: text tokenized, messages rendered,
// a seed drawn when the request sets none), the submit, the count of
// refusals the engine never saw, and how a finished request ends.
#ifndef FLOVER_SERVER_REQUEST_SESSION_H_
#define FLOVER_SERVER_REQUEST_SESSION_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chat/reply_reader.h"
#include "engine/engine.h"
#include "model/pooling.h"
#include "proto/flover.pb.h"
#include "server/request_convert.h"
#include "tokenizer/tokenizer.h"

namespace flover::server {

// What a front end serves requests with; every pointer but the engine may
// be null (no tokenizer: token ids only, no constraints; no chat support:
// messages refused). `token_bytes`: the tokenizer's vocabulary as bytes,
// built once, for constraints.
struct ServingContext {
  Engine& engine;
  const Tokenizer* tokenizer = nullptr;
  const ChatSupport* chat = nullptr;
  std::shared_ptr<const TokenBytes> token_bytes;
  std::shared_ptr<GrammarConstraints> grammars;  // JSON schemas, regexes, grammars
  // With --embeddings: how an input's hidden rows are pooled (else none).
  std::optional<Pooling> pooling;
  // A vision model's image side (else null: images refused), and where
  // remote images may come from.
  const ImageProcessor* image_processor = nullptr;
  const ImageFetchOptions* image_fetch = nullptr;

  // What request_convert needs of it.
  ConvertContext convert() const {
    ConvertContext c{tokenizer, chat, token_bytes, engine.model().info().vocab_size, grammars.get()};
    c.image_processor = image_processor;
    c.image_fetch = image_fetch;
    return c;
  }
};

// A request the engine took.
struct SubmittedRequest {
  RequestId id = 0;
  std::vector<int32_t> prompt;  // its tokens, after the chat template
};

// Collects one request's events from the engine thread for an HTTP worker.
class CollectingSink final : public TokenSink {
 public:
  void OnToken(RequestId, const TokenEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_.push_back(e);
    cv_.notify_all();
  }
  void OnFinish(RequestId, const FinishEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    finish_ = e;
    cv_.notify_all();
  }
  // Moves out what has arrived, waiting up to `timeout` for something.
  void Take(std::vector<TokenEvent>* tokens, std::optional<FinishEvent>* finish,
            absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                 [&] { return !tokens_.empty() || finish_.has_value(); });
    tokens->swap(tokens_);
    tokens_.clear();
    *finish = std::move(finish_);
    finish_.reset();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenEvent> tokens_;
  std::optional<FinishEvent> finish_;
};

// How a chat front end reads the reply to `request`, submitted with
// `prompt`: the server's reasoning parser (starting inside the reasoning
// where the prompt opened it) and, where the request lets the model call
// its tools, the tool-call format, calls named `call_id_prefix` + their
// index and streamed argument by argument with `stream`.
ReplyReader::Options ReplyOptions(const ServingContext& serving, const ClientRequest& request,
                                  absl::Span<const int32_t> prompt, std::string call_id_prefix, bool stream);

// `prefix` and 16 random hex digits: ids that differ across requests and
// restarts.
std::string RandomId(absl::string_view prefix);

// Waits for the end of the request `sink` collects: its whole text and
// its finish event.
std::pair<std::string, FinishEvent> WholeReply(CollectingSink& sink);

// Converts `request`, lets `adjust` set what the front end decides (the
// call's deadline; chat's default length), and submits it with `sink`. A
// conversion error is counted here, as the engine counts its own refusals.
absl::StatusOr<SubmittedRequest> SubmitRequest(const ServingContext& serving,
                                               const ClientRequest& request,
                                               std::shared_ptr<TokenSink> sink,
                                               const std::function<void(Request&)>& adjust = {});

// Counts a refusal before conversion (a bad key, a body that does not
// parse) in the engine's error metrics, and returns it.
absl::Status CountRefusal(Engine& engine, absl::Status status);

// OK for a request that finished (length, stop, EOS); otherwise the status
// its call ends with (cancelled, deadline exceeded, the engine's error).
absl::Status EndStatus(const FinishEvent& finish);

}  // namespace flover::server

#endif  // FLOVER_SERVER_REQUEST_SESSION_H_
