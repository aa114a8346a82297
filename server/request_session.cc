#include "server/request_session.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "chat/harmony_reader.h"

namespace flover::server {

ReplyReader::Options ReplyOptions(const ServingContext& serving, const ClientRequest& request,
                                  absl::Span<const int32_t> prompt, std::string call_id_prefix, bool stream) {
  ReplyReader::Options o;
  if (serving.chat != nullptr) o.reasoning = serving.chat->reasoning;
  o.starts_in_reasoning = PromptOpensReasoning(serving.chat, serving.tokenizer, prompt);
  if (o.reasoning == ReasoningFormat::kHarmony && serving.tokenizer != nullptr) {
    // A call the server opened (a named tool_choice): its header's tokens.
    const size_t tail = std::min<size_t>(prompt.size(), 64);
    o.open_header = HarmonyOpenHeader(
        serving.tokenizer->Decode(std::vector<int32_t>(prompt.end() - tail, prompt.end())));
  }
  if (serving.chat != nullptr && !request.tools.empty() && ToolChoiceOf(request) != ToolChoice::kNone) {
    o.tools = serving.chat->tool_format;
  }
  o.call_id_prefix = std::move(call_id_prefix);
  o.stream_arguments = stream;
  return o;
}

std::string RandomId(absl::string_view prefix) {
  static std::mutex mu;
  static std::mt19937_64 bits(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return absl::StrCat(prefix, absl::Hex(bits(), absl::kZeroPad16));
}

std::pair<std::string, FinishEvent> WholeReply(CollectingSink& sink) {
  std::string text;
  std::optional<FinishEvent> finish;
  while (!finish.has_value()) {
    std::vector<TokenEvent> more;
    sink.Take(&more, &finish, absl::Seconds(1));
    for (const TokenEvent& t : more) text += t.text;
  }
  return {std::move(text), *std::move(finish)};
}


absl::StatusOr<SubmittedRequest> SubmitRequest(const ServingContext& serving,
                                               const ClientRequest& request,
                                               std::shared_ptr<TokenSink> sink,
                                               const std::function<void(Request&)>& adjust) {
  Engine& engine = serving.engine;
  auto converted = ToEngineRequest(request, serving.convert(),
                                   std::random_device{}() * 0x9e3779b97f4a7c15ull);
  if (!converted.ok()) return CountRefusal(engine, converted.status());  // the engine never saw it
  if (adjust) adjust(*converted);
  SubmittedRequest out;
  out.prompt = converted->prompt;
  auto id = engine.Submit(std::move(*converted), std::move(sink));  // counts its own refusals
  if (!id.ok()) return id.status();
  out.id = *id;
  return out;
}

absl::Status CountRefusal(Engine& engine, absl::Status status) {
  engine.metrics().CountError(status.code());
  return status;
}

absl::Status EndStatus(const FinishEvent& finish) {
  switch (finish.reason) {
    case FinishReason::kLength:
    case FinishReason::kStop:
    case FinishReason::kEos:
      return absl::OkStatus();
    case FinishReason::kCancelled:
      return absl::CancelledError("the request was cancelled");
    case FinishReason::kDeadline:
      return absl::DeadlineExceededError("the request's deadline passed");
    case FinishReason::kError:
      return finish.error.ok() ? absl::InternalError("engine error") : finish.error;
  }
  return absl::OkStatus();
}

}  // namespace flover::server
