#include "server/openai_api.h"

#include <httplib.h>

#include <condition_variable>
#include <cstring>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "server/request_convert.h"
#include "server/server_options.h"
#include "server/status_util.h"
#include "util/json.h"

namespace flover::server {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

template <typename... Parts>
absl::Status Bad(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

absl::StatusOr<bool> BoolField(const Struct& s, absl::string_view key, bool dflt) {
  if (!JsonHas(s, key)) return dflt;
  const Value& v = s.fields().at(std::string(key));
  if (!v.has_bool_value()) return Bad(key, ": must be true or false");
  return v.bool_value();
}

// A prompt of token ids: every element a non-negative integer.
absl::Status AddTokenIds(const google::protobuf::ListValue& list, v1::GenerateRequest* out) {
  for (const Value& v : list.values()) {
    auto id = JsonToInt(v, "prompt", 0, std::numeric_limits<uint32_t>::max());
    if (!id.ok()) return Bad("prompt: token ids must be integers >= 0");
    out->mutable_token_ids()->add_ids(static_cast<uint32_t>(*id));
  }
  return absl::OkStatus();
}

bool AllNumbers(const google::protobuf::ListValue& list) {
  for (const Value& v : list.values()) {
    if (!v.has_number_value()) return false;
  }
  return true;
}

absl::Status ParsePrompt(const Struct& body, v1::GenerateRequest* out) {
  if (!JsonHas(body, "prompt")) return Bad("prompt: is required");
  const Value& p = body.fields().at("prompt");
  if (p.has_string_value()) {
    out->set_text(p.string_value());
    return absl::OkStatus();
  }
  if (!p.has_list_value()) return Bad("prompt: must be a string or a list of token ids");
  const auto& list = p.list_value();
  if (list.values_size() == 0) return Bad("prompt: is empty");
  if (AllNumbers(list)) return AddTokenIds(list, out);
  if (list.values_size() > 1) {
    return Bad("prompt: a list of several prompts is not supported; send one request per prompt");
  }
  const Value& only = list.values(0);
  if (only.has_string_value()) {
    out->set_text(only.string_value());
    return absl::OkStatus();
  }
  if (only.has_list_value() && AllNumbers(only.list_value())) {
    if (only.list_value().values_size() == 0) return Bad("prompt: is empty");
    return AddTokenIds(only.list_value(), out);
  }
  return Bad("prompt: must be a string or a list of token ids");
}

// A field this server takes only at its neutral value.
absl::Status RequireNeutral(const Struct& body) {
  for (const char* key : {"n", "best_of"}) {
    if (!JsonHas(body, key)) continue;
    auto v = JsonToInt(body.fields().at(key), key, 1, 1 << 30);
    if (!v.ok()) return Bad(key, ": must be a positive integer");
    if (*v != 1) return Bad(key, ": only 1 is supported, got ", *v);
  }
  for (const char* key : {"frequency_penalty", "presence_penalty"}) {
    auto v = JsonNumberField(body, key, 0, key);
    if (!v.ok()) return Bad(key, ": must be a number");
    if (*v != 0) return Bad(key, ": is not supported (only 0); repetition_penalty is");
  }
  if (JsonHas(body, "logit_bias")) {
    const Value& v = body.fields().at("logit_bias");
    if (!v.has_struct_value() || v.struct_value().fields_size() > 0) {
      return Bad("logit_bias: is not supported");
    }
  }
  if (JsonHas(body, "suffix")) {
    const Value& v = body.fields().at("suffix");
    if (!v.has_string_value() || !v.string_value().empty()) return Bad("suffix: is not supported");
  }
  return absl::OkStatus();
}

// The engine's field names, as this API spells them.
std::string ApiMessage(absl::string_view message) {
  std::string m = absl::StrReplaceAll(
      message, {{"max_new_tokens", "max_tokens"}, {"stop_strings", "stop"}});
  for (const char* prefix : {"text: ", "token_ids: "}) {
    if (absl::StartsWith(m, prefix)) m = absl::StrCat("prompt: ", m.substr(strlen(prefix)));
  }
  return m;
}

// The parameter an error message starts with ("max_tokens: ..."), if any.
std::string ParamOf(absl::string_view message) {
  const size_t colon = message.find(':');
  if (colon == absl::string_view::npos || colon == 0) return "";
  for (char c : message.substr(0, colon)) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return "";
  }
  return std::string(message.substr(0, colon));
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 404: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    default: return "server_error";
  }
}

void Fail(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status);
  res.set_content(OpenAiErrorBody(status), "application/json");
}

absl::Status EndStatus(const FinishEvent& e) {
  switch (e.reason) {
    case FinishReason::kLength:
    case FinishReason::kStop:
    case FinishReason::kEos:
      return absl::OkStatus();
    case FinishReason::kCancelled:
      return absl::CancelledError("the request was cancelled");
    case FinishReason::kDeadline:
      return absl::DeadlineExceededError("the request's deadline passed");
    case FinishReason::kError:
      return e.error.ok() ? absl::InternalError("engine error") : e.error;
  }
  return absl::OkStatus();
}

// Collects one request's events from the engine thread for an HTTP worker.
class CompletionSink final : public TokenSink {
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

// Writes the JSON of completion responses and stream chunks.
struct Completion {
  std::string id;
  int64_t created = 0;
  std::string model;
  const Tokenizer* tokenizer = nullptr;
  bool logprobs = false;
  int prompt_tokens = 0;

  std::string TokenString(int32_t id) const {
    return tokenizer != nullptr ? tokenizer->Decode({id}) : absl::StrCat("token_id:", id);
  }

  // One choice: `text`, the tokens' ids (and log-probabilities when asked),
  // and the finish reason (null while streaming).
  std::string Choice(const std::string& text, const std::vector<TokenEvent>& tokens,
                     const FinishEvent* finish) const {
    std::vector<std::string> ids, strings, lps, tops;
    for (const TokenEvent& t : tokens) {
      ids.push_back(absl::StrCat(t.token));
      if (!logprobs) continue;
      const std::string s = JsonQuote(TokenString(t.token));
      const std::string lp = absl::StrFormat("%.9g", t.logprob);
      strings.push_back(s);
      lps.push_back(lp);
      tops.push_back(absl::StrCat("{", s, ": ", lp, "}"));
    }
    std::string lp_json = "null";
    if (logprobs) {
      lp_json = absl::StrCat("{\"tokens\": [", absl::StrJoin(strings, ", "),
                             "], \"token_logprobs\": [", absl::StrJoin(lps, ", "),
                             "], \"top_logprobs\": [", absl::StrJoin(tops, ", "), "]}");
    }
    std::string reason = "null";
    if (finish != nullptr) reason = finish->reason == FinishReason::kLength ? "\"length\"" : "\"stop\"";
    return absl::StrCat("{\"index\": 0, \"text\": ", JsonQuote(text), ", \"logprobs\": ", lp_json,
                        ", \"finish_reason\": ", reason, ", \"token_ids\": [",
                        absl::StrJoin(ids, ", "), "]}");
  }

  std::string Usage(int generated) const {
    return absl::StrCat("{\"prompt_tokens\": ", prompt_tokens, ", \"completion_tokens\": ",
                        generated, ", \"total_tokens\": ", prompt_tokens + generated, "}");
  }

  std::string Object(const std::string& choices, const std::string& usage) const {
    return absl::StrCat("{\"id\": ", JsonQuote(id), ", \"object\": \"text_completion\", \"created\": ",
                        created, ", \"model\": ", JsonQuote(model), ", \"choices\": [", choices, "]",
                        usage.empty() ? "" : absl::StrCat(", \"usage\": ", usage), "}");
  }
};

std::string Event(const std::string& json) { return absl::StrCat("data: ", json, "\n\n"); }

void Complete(httplib::Response& res, Engine& engine, const Tokenizer* tokenizer,
              const std::string& model, const CompletionRequest& parsed) {
  if (parsed.echo && tokenizer == nullptr) {
    return Fail(res, Bad("echo: the model has no tokenizer"));
  }
  if (parsed.echo && parsed.request.return_logprobs()) {
    return Fail(res, Bad("echo: is not supported with logprobs (prompt log-probabilities are "
                         "not computed)"));
  }
  auto converted = ToEngineRequest(parsed.request, tokenizer, engine.model().info().vocab_size,
                                   std::random_device{}() * 0x9e3779b97f4a7c15ull);
  if (!converted.ok()) {
    engine.metrics().CountError(converted.status().code());  // the engine never saw it
    return Fail(res, converted.status());
  }
  auto c = std::make_shared<Completion>();
  c->created = absl::ToUnixSeconds(absl::Now());
  c->model = model;
  c->tokenizer = tokenizer;
  c->logprobs = parsed.request.return_logprobs();
  c->prompt_tokens = static_cast<int>(converted->prompt.size());
  const std::string echo = parsed.echo ? tokenizer->Decode(converted->prompt) : "";
  auto sink = std::make_shared<CompletionSink>();
  auto id = engine.Submit(std::move(*converted), sink);
  if (!id.ok()) return Fail(res, id.status());  // counted by the engine
  c->id = absl::StrCat("cmpl-", *id);

  if (!parsed.stream) {
    // The worker waits for the end. (A client that leaves meanwhile is
    // noticed only when the answer is written: the request runs to its end.)
    std::vector<TokenEvent> all, more;
    std::optional<FinishEvent> finish;
    std::string text = echo;
    while (!finish.has_value()) {
      sink->Take(&more, &finish, absl::Seconds(1));
      for (TokenEvent& t : more) {
        text += t.text;
        all.push_back(std::move(t));
      }
    }
    if (absl::Status st = EndStatus(*finish); !st.ok()) return Fail(res, st);
    text += finish->text;
    res.set_content(c->Object(c->Choice(text, all, &*finish), c->Usage(finish->usage.generated_tokens)),
                    "application/json");
    return;
  }

  struct StreamState {
    bool echo_sent = false;
    bool finished = false;
  };
  auto state = std::make_shared<StreamState>();
  const bool include_usage = parsed.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [c, sink, state, echo, include_usage](size_t, httplib::DataSink& out) {
        std::vector<TokenEvent> tokens;
        std::optional<FinishEvent> finish;
        sink->Take(&tokens, &finish, absl::Milliseconds(100));
        std::string chunk;
        if (!state->echo_sent) {
          state->echo_sent = true;
          if (!echo.empty()) chunk += Event(c->Object(c->Choice(echo, {}, nullptr), ""));
        }
        if (!tokens.empty()) {
          std::string text;
          for (const TokenEvent& t : tokens) text += t.text;
          chunk += Event(c->Object(c->Choice(text, tokens, nullptr), ""));
        }
        if (finish.has_value()) {
          state->finished = true;
          if (absl::Status st = EndStatus(*finish); !st.ok()) {
            chunk += Event(OpenAiErrorBody(st));
          } else {
            chunk += Event(c->Object(c->Choice(finish->text, {}, &*finish), ""));
            if (include_usage) {
              chunk += Event(absl::StrCat(
                  "{\"id\": ", JsonQuote(c->id), ", \"object\": \"text_completion\", \"created\": ",
                  c->created, ", \"model\": ", JsonQuote(c->model), ", \"choices\": [], \"usage\": ",
                  c->Usage(finish->usage.generated_tokens), "}"));
            }
          }
          chunk += "data: [DONE]\n\n";
        }
        // A failed write means the client left: the releaser cancels.
        if (!chunk.empty() && !out.write(chunk.data(), chunk.size())) return false;
        if (state->finished) out.done();
        return true;
      },
      [&engine, state, id = *id](bool) {
        if (!state->finished) (void)engine.Cancel(id);  // the slot is freed at the next step
      });
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         absl::string_view served_model) {
  auto parsed = ParseJsonObject(body, "request body");
  if (!parsed.ok()) return absl::InvalidArgumentError(parsed.status().message());
  const Struct& b = *parsed;
  if (JsonHas(b, "model")) {
    const Value& m = b.fields().at("model");
    if (!m.has_string_value()) return Bad("model: must be a string");
    if (m.string_value() != served_model) {
      return absl::NotFoundError(absl::StrCat("model: \"", m.string_value(),
                                              "\" is not served here (this server serves \"",
                                              served_model, "\")"));
    }
  }
  CompletionRequest out;
  v1::GenerateRequest& r = out.request;
  if (absl::Status st = ParsePrompt(b, &r); !st.ok()) return st;
  if (absl::Status st = RequireNeutral(b); !st.ok()) return st;

  if (JsonHas(b, "max_tokens")) {
    auto v = JsonToInt(b.fields().at("max_tokens"), "max_tokens", 0, 1 << 30);
    if (!v.ok()) return Bad("max_tokens: must be an integer >= 1");
    r.mutable_stopping()->set_max_new_tokens(static_cast<uint32_t>(*v));
  }
  struct NumberField {
    const char* key;
    void (v1::Sampling::*set)(float);
  };
  for (const NumberField& f : {NumberField{"temperature", &v1::Sampling::set_temperature},
                               NumberField{"top_p", &v1::Sampling::set_top_p},
                               NumberField{"repetition_penalty",
                                           &v1::Sampling::set_repetition_penalty}}) {
    if (!JsonHas(b, f.key)) continue;
    auto v = JsonNumberField(b, f.key, 0, f.key);
    if (!v.ok()) return Bad(f.key, ": must be a number");
    (r.mutable_sampling()->*f.set)(static_cast<float>(*v));
  }
  if (JsonHas(b, "top_k")) {
    auto v = JsonToInt(b.fields().at("top_k"), "top_k", -1, 1 << 30);
    if (!v.ok()) return Bad("top_k: must be an integer >= -1 (-1 or 0 = no limit)");
    r.mutable_sampling()->set_top_k(*v < 0 ? 0 : static_cast<int32_t>(*v));
  }
  if (JsonHas(b, "seed")) {
    auto v = JsonToInt(b.fields().at("seed"), "seed", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max());
    if (!v.ok()) return Bad("seed: must be an integer");
    r.mutable_sampling()->set_seed(static_cast<uint64_t>(*v));
  }
  if (JsonHas(b, "stop")) {
    const Value& s = b.fields().at("stop");
    if (s.has_string_value()) {
      r.mutable_stopping()->add_stop_strings(s.string_value());
    } else if (s.has_list_value()) {
      for (const Value& v : s.list_value().values()) {
        if (!v.has_string_value()) return Bad("stop: must be a string or a list of strings");
        r.mutable_stopping()->add_stop_strings(v.string_value());
      }
    } else {
      return Bad("stop: must be a string or a list of strings");
    }
  }
  auto ignore_eos = BoolField(b, "ignore_eos", false);
  if (!ignore_eos.ok()) return ignore_eos.status();
  r.mutable_stopping()->set_ignore_eos(*ignore_eos);
  if (JsonHas(b, "logprobs")) {
    auto v = JsonToInt(b.fields().at("logprobs"), "logprobs", 0, 1 << 30);
    if (!v.ok()) return Bad("logprobs: must be an integer >= 0");
    if (*v > 1) {
      return Bad("logprobs: at most 1 is supported (the sampled token's log-probability; no "
                 "alternatives), got ", *v);
    }
    r.set_return_logprobs(true);
  }
  auto echo = BoolField(b, "echo", false);
  if (!echo.ok()) return echo.status();
  out.echo = *echo;
  auto stream = BoolField(b, "stream", false);
  if (!stream.ok()) return stream.status();
  out.stream = *stream;
  if (JsonHas(b, "stream_options")) {
    const Value& o = b.fields().at("stream_options");
    if (!o.has_struct_value()) return Bad("stream_options: must be an object");
    auto usage = BoolField(o.struct_value(), "include_usage", false);
    if (!usage.ok()) return Bad("stream_options.", usage.status().message());
    out.include_usage = *usage;
  }
  return out;
}

std::string OpenAiErrorBody(const absl::Status& status) {
  const std::string message = ApiMessage(status.message());
  const std::string param = ParamOf(message);
  const int http = HttpStatusOf(status);
  return absl::StrCat("{\"error\": {\"message\": ", JsonQuote(message), ", \"type\": \"",
                      ErrorType(http), "\", \"param\": ",
                      param.empty() ? "null" : JsonQuote(param), ", \"code\": ",
                      JsonQuote(absl::AsciiStrToLower(absl::StatusCodeToString(status.code()))),
                      "}}");
}

void AddOpenAiRoutes(httplib::Server& http, Engine& engine, const Tokenizer* tokenizer,
                     std::string model_name, const ApiKeys* keys) {
  // With keys, a request without a valid one is answered 401 (and counted).
  auto authorized = [&engine, keys](const httplib::Request& req, httplib::Response& res) {
    if (keys == nullptr) return true;
    absl::Status st = keys->Check(req.get_header_value("Authorization"));
    if (st.ok()) return true;
    engine.metrics().CountError(st.code());
    Fail(res, st);
    return false;
  };
  // A body over the port's limit is refused (413) before it is read; the
  // answer takes OpenAI's error shape like every other.
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 413 && res.body.empty()) {
      res.set_content(OpenAiErrorBody(absl::InvalidArgumentError(absl::StrCat(
                          "request body: larger than the limit of ", kMaxHttpBodyBytes, " bytes"))),
                      "application/json");
    }
  });
  const int64_t started = absl::ToUnixSeconds(absl::Now());
  http.Get("/health", [&engine](const httplib::Request&, httplib::Response& res) {
    const bool ok = engine.Accepting() && engine.FatalError().ok();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "{\"status\": \"ok\"}" : "{\"status\": \"unavailable\"}",
                    "application/json");
  });
  http.Get("/v1/models", [&engine, model_name, started, authorized](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!authorized(req, res)) return;
    res.set_content(
        absl::StrCat("{\"object\": \"list\", \"data\": [{\"id\": ", JsonQuote(model_name),
                     ", \"object\": \"model\", \"created\": ", started,
                     ", \"owned_by\": \"flover\", \"max_model_len\": ",
                     engine.options().max_seq_len, ", \"vocab_size\": ",
                     engine.model().info().vocab_size, "}]}"),
        "application/json");
  });
  http.Post("/v1/completions", [&engine, tokenizer, model_name, authorized](
                                   const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    auto parsed = ParseCompletionRequest(req.body, model_name);
    if (!parsed.ok()) {
      engine.metrics().CountError(parsed.status().code());
      return Fail(res, parsed.status());
    }
    Complete(res, engine, tokenizer, model_name, *parsed);
  });
}

}  // namespace flover::server
