#include "server/request_session.h"

#include <random>

namespace flover::server {

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
