#include "server/openai_api.h"

#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "chat/reply_reader.h"
#include "chat/tool_calls.h"
#include "server/reply_stream.h"
#include "server/request_session.h"
#include "server/server_options.h"
#include "server/status_util.h"
#include "server/json_body.h"

namespace flover::server {
namespace {

void Fail(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status);
  res.set_content(OpenAiErrorBody(status), "application/json");
}


// One request's answer in its endpoint's JSON: a text_completion, or a
// chat.completion (chat.completion.chunk when streamed).
class Answer {
 public:
  // `reasons`: chat replies carry reasoning_content (a reasoning parser reads them).
  Answer(bool chat, std::string id, std::string model, const Tokenizer* tokenizer, bool logprobs,
         int prompt_tokens, bool reasons = false)
      : chat_(chat),
        reasons_(chat && reasons),
        id_(std::move(id)),
        created_(absl::ToUnixSeconds(absl::Now())),
        model_(std::move(model)),
        tokenizer_(tokenizer),
        logprobs_(logprobs),
        prompt_tokens_(prompt_tokens) {}

  const std::string& id() const { return id_; }

  // One sample's text, tokens and end, for the whole answer; with tools,
  // its calls (the text then is what is left around them).
  struct Result {
    std::string text;
    std::vector<TokenEvent> tokens;
    FinishEvent finish;
    std::vector<ToolCall> calls;
    std::string reasoning;
  };

  // What choice `index`'s stream starts with: chat's role; completions'
  // echoed prompt.
  std::string Opening(int index, const std::string& echo) const {
    if (chat_) return Object(Choice(index, "", {}, nullptr, Part::kOpening), nullptr);
    return echo.empty() ? "" : Object(Choice(index, echo, {}, nullptr, Part::kDelta), nullptr);
  }
  // A stream chunk of choice `index` with these tokens (the last one carries
  // `finish`).
  std::string Chunk(int index, const std::string& text, const std::vector<TokenEvent>& tokens,
                    const FinishEvent* finish, bool called = false, const std::string& reasoning = "") const {
    return Object(Choice(index, text, tokens, finish, Part::kDelta, called, reasoning), nullptr);
  }
  // A call of choice `index` as OpenAI streams it: first a delta with its
  // id, type and name (arguments ""), then deltas with fragments of its
  // arguments.
  std::string CallBeginChunk(int index, int call_index, const ToolCall& call) const {
    return CallDelta(index, {{"index", call_index},
                             {"id", call.id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", ""}}}});
  }
  std::string CallArgumentsChunk(int index, int call_index, const std::string& fragment) const {
    return CallDelta(index, {{"index", call_index}, {"function", {{"arguments", fragment}}}});
  }
  std::string UsageChunk(int generated) const {
    const Json usage = Usage(generated);
    return Object(Json::array(), &usage);
  }
  // The whole answer, not streamed: every sample, in order.
  std::string Whole(const std::vector<Result>& results) const {
    Json choices = Json::array();
    int generated = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      Json choice =
          Choice(static_cast<int>(i), r.text, r.tokens, &r.finish, Part::kWhole, !r.calls.empty(), r.reasoning);
      if (!r.calls.empty()) {
        Json calls = Json::array();
        for (const ToolCall& c : r.calls) {
          calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        }
        // No text beside the calls: content is null, as OpenAI's.
        if (r.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = std::move(calls);
      }
      choices.push_back(std::move(choice));
      generated += r.finish.usage.generated_tokens;
    }
    const Json usage = Usage(generated);
    return Object(std::move(choices), &usage);
  }

 private:
  enum class Part { kOpening, kDelta, kWhole };

  // A stream event of choice `index` whose delta is one tool-call delta.
  std::string CallDelta(int index, Json delta) const {
    Json choice = {{"index", index},
                   {"delta", {{"tool_calls", Json::array({std::move(delta)})}}},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}};
    return absl::StrCat("data: ", Object(std::move(choice), nullptr), "\n\n");
  }

  std::string TokenString(int32_t id) const {
    return tokenizer_ != nullptr ? tokenizer_->Decode({id}) : absl::StrCat("token_id:", id);
  }
  Json Bytes(int32_t id) const {
    Json b = Json::array();
    if (tokenizer_ != nullptr) {
      for (unsigned char c : tokenizer_->DecodeBytes({id})) b.push_back(int{c});
    }
    return b;
  }

  // completions: {"tokens", "token_logprobs", "top_logprobs": [{token: lp}]};
  // chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
  Json Logprobs(const std::vector<TokenEvent>& tokens) const {
    if (!logprobs_) return nullptr;
    if (chat_) {
      Json content = Json::array();
      for (const TokenEvent& t : tokens) {
        Json tops = Json::array();
        for (const auto& [id, lp] : t.top_logprobs) {
          tops.push_back({{"token", TokenString(id)}, {"logprob", lp}, {"bytes", Bytes(id)}});
        }
        content.push_back({{"token", TokenString(t.token)},
                           {"logprob", t.logprob},
                           {"bytes", Bytes(t.token)},
                           {"top_logprobs", std::move(tops)}});
      }
      return {{"content", std::move(content)}};
    }
    Json strings = Json::array(), lps = Json::array(),
                tops = Json::array();
    for (const TokenEvent& t : tokens) {
      strings.push_back(TokenString(t.token));
      lps.push_back(t.logprob);
      // An object: of alternatives that print alike (partial characters, say)
      // the most likely is kept, so no key repeats.
      Json top = Json::object();
      for (const auto& [id, lp] : t.top_logprobs) {
        const std::string key = TokenString(id);
        if (!top.contains(key)) top[key] = lp;
      }
      tops.push_back(std::move(top));
    }
    return {{"tokens", std::move(strings)}, {"token_logprobs", std::move(lps)},
            {"top_logprobs", std::move(tops)}};
  }

  // `called`: the sample made tool calls (its finish reason says so).
  // `reasoning`: the reply's reasoning (whole), or this chunk's.
  Json Choice(int index, const std::string& text, const std::vector<TokenEvent>& tokens,
                     const FinishEvent* finish, Part part, bool called = false,
                     const std::string& reasoning = "") const {
    Json choice = {{"index", index}};
    if (!chat_) {
      choice["text"] = text;
    } else if (part == Part::kWhole) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      if (reasons_) choice["message"]["reasoning_content"] = reasoning.empty() ? Json(nullptr) : Json(reasoning);
    } else if (part == Part::kOpening) {
      choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    } else {
      choice["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
      if (!reasoning.empty()) choice["delta"]["reasoning_content"] = reasoning;
    }
    choice["logprobs"] = part == Part::kOpening ? Json(nullptr) : Logprobs(tokens);
    choice["finish_reason"] = finish == nullptr                          ? Json(nullptr)
                              : called                                   ? Json("tool_calls")
                              : finish->reason == FinishReason::kLength ? Json("length")
                                                                         : Json("stop");
    Json ids = Json::array();
    for (const TokenEvent& t : tokens) ids.push_back(t.token);
    choice["token_ids"] = std::move(ids);
    return choice;
  }

  Json Usage(int generated) const {
    return {{"prompt_tokens", prompt_tokens_},
            {"completion_tokens", generated},
            {"total_tokens", prompt_tokens_ + generated}};
  }

  // The object around one choice, or a list of them (an empty list: a
  // usage-only chunk), with usage when given.
  std::string Object(Json choice, const Json* usage) const {
    const bool chunk = usage == nullptr || (choice.is_array() && choice.empty());
    const char* object = !chat_ ? "text_completion" : chunk ? "chat.completion.chunk" : "chat.completion";
    Json choices = choice.is_array() ? std::move(choice) : Json::array({std::move(choice)});
    Json out = {{"id", id_},
                       {"object", object},
                       {"created", created_},
                       {"model", model_},
                       {"choices", std::move(choices)}};
    if (usage != nullptr) out["usage"] = *usage;
    return JsonText(out);
  }

  const bool chat_;
  const bool reasons_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const Tokenizer* tokenizer_;
  const bool logprobs_;
  const int prompt_tokens_;
};

std::string Event(const std::string& json) { return absl::StrCat("data: ", json, "\n\n"); }


// Serves one parsed request, either endpoint: submit, then the whole
// answer, or a stream of server-sent events.
// One of a request's n samples as it is served.
struct Sample {
  std::shared_ptr<CollectingSink> sink = std::make_shared<CollectingSink>();
  RequestId id = 0;
  std::vector<TokenEvent> pending;  // taken while its siblings were submitted
  std::optional<FinishEvent> finish;
  bool opened = false;
  bool done = false;  // streamed: its last chunk was sent
  std::unique_ptr<ReplyReader> reader;  // a chat reply's parts (its calls: with tools)
};

// Serves one parsed request, either endpoint: submit its samples, then the
// whole answer, or a stream of server-sent events. With n > 1 the first
// sample is submitted alone and the others once it has its first token, so
// they find its prompt's KV blocks in the prefix cache instead of computing
// them again; with a seed, sample i draws with seed + i.
void Serve(httplib::Response& res, const ServingContext& serving, const std::string& model,
           const OpenAiRequest& parsed, bool is_chat) {
  Engine& engine = serving.engine;
  const Tokenizer* tokenizer = serving.tokenizer;
  if (parsed.echo && tokenizer == nullptr) {
    return Fail(res, absl::InvalidArgumentError("echo: the model has no tokenizer"));
  }
  if (parsed.echo && parsed.request.return_logprobs) {
    return Fail(res, absl::InvalidArgumentError(
                         "echo: is not supported with logprobs (prompt log-probabilities are not "
                         "computed)"));
  }
  auto samples = std::make_shared<std::vector<Sample>>(parsed.n);
  auto cancel_all = [&engine](const std::vector<Sample>& all) {
    for (const Sample& s : all) {
      if (s.id != 0 && !s.finish.has_value()) (void)engine.Cancel(s.id);
    }
  };
  std::vector<int32_t> prompt;
  for (int i = 0; i < parsed.n; ++i) {
    Sample& sample = (*samples)[i];
    ClientRequest request = parsed.request;
    if (request.seed.has_value()) request.seed = *request.seed + static_cast<uint64_t>(i);
    auto submitted = SubmitRequest(serving, request, sample.sink, [&](Request& r) {
      if (is_chat && !parsed.request.max_new_tokens.has_value()) {
        // As OpenAI's: a reply without max_tokens may fill the context (up to
        // the server's limit, and what the KV cache holds); a prompt that
        // fills it already is refused by the engine.
        const int prompt_tokens = static_cast<int>(r.prompt.size());
        r.stop.max_new_tokens = std::max(
            1, std::min(engine.options().max_new_tokens_limit, engine.max_context() - prompt_tokens));
      }
    });
    if (!submitted.ok()) {
      cancel_all(*samples);
      return Fail(res, submitted.status());  // counted
    }
    sample.id = submitted->id;
    prompt = submitted->prompt;
    if (i == 0 && parsed.n > 1) {
      // Its prompt computed (and in the prefix cache) by its first token.
      while (sample.pending.empty() && !sample.finish.has_value()) {
        sample.sink->Take(&sample.pending, &sample.finish, absl::Seconds(1));
      }
    }
  }
  // With tools (and a choice other than none), calls are read out of each
  // sample's text in the server's tool-call format.
  const bool reads_calls = is_chat && serving.chat != nullptr && !parsed.request.tools.empty() &&
                           ToolChoiceOf(parsed.request) != ToolChoice::kNone;
  // Chat replies' reasoning, split off by the server's reasoning parser.
  const ReasoningFormat reasoning =
      is_chat && serving.chat != nullptr ? serving.chat->reasoning : ReasoningFormat::kNone;
  const std::string call_ids = RandomId("call_") + "_";
  auto reading = [&](int i) {
    // The grammar holds the calls (request_convert refuses a choice it
    // cannot hold), so a streamed call's arguments go out as written.
    return ReplyOptions(serving, parsed.request, prompt, parsed.n > 1 ? absl::StrCat(call_ids, i, "_") : call_ids,
                        parsed.stream);
  };
  if (reads_calls || reasoning != ReasoningFormat::kNone) {
    for (int i = 0; i < parsed.n; ++i) (*samples)[i].reader = std::make_unique<ReplyReader>(reading(i));
  }
  const int prompt_tokens = static_cast<int>(prompt.size());
  const std::string echo = parsed.echo ? tokenizer->Decode(prompt) : "";
  auto answer = std::make_shared<Answer>(is_chat, absl::StrCat(is_chat ? "chatcmpl-" : "cmpl-", (*samples)[0].id),
                                         model, tokenizer, parsed.request.return_logprobs,
                                         prompt_tokens, reasoning != ReasoningFormat::kNone);

  if (!parsed.stream) {
    // The worker waits for the end. (A client that leaves meanwhile is
    // noticed only when the answer is written: the request runs to its end.)
    std::vector<Answer::Result> results(parsed.n);
    for (int i = 0; i < parsed.n; ++i) {
      Sample& sample = (*samples)[i];
      Answer::Result& result = results[i];
      result.text = echo;
      std::vector<TokenEvent> more = std::move(sample.pending);
      while (true) {
        for (TokenEvent& t : more) {
          result.text += t.text;
          result.tokens.push_back(std::move(t));
        }
        more.clear();
        if (sample.finish.has_value()) break;
        sample.sink->Take(&more, &sample.finish, absl::Seconds(1));
      }
      if (absl::Status st = EndStatus(*sample.finish); !st.ok()) {
        cancel_all(*samples);
        return Fail(res, st);
      }
      result.text += sample.finish->text;
      result.finish = *sample.finish;
      if (sample.reader != nullptr) {
        Reply reply = ReadReply(reading(i), result.text);
        result.text = std::move(reply.content);
        result.calls = std::move(reply.calls);
        result.reasoning = std::move(reply.reasoning);
      }
    }
    res.set_content(answer->Whole(results), "application/json");
    return;
  }

  struct StreamState {
    bool finished = false;
    int generated = 0;
  };
  auto state = std::make_shared<StreamState>();
  const bool include_usage = parsed.include_usage;
  // Each wait is short when several samples take turns.
  const absl::Duration wait = absl::Milliseconds(parsed.n > 1 ? 20 : 100);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [answer, samples, state, echo, include_usage, wait, &engine](size_t, httplib::DataSink& out) {
        std::string chunk;
        bool all_done = true;
        for (size_t i = 0; i < samples->size() && !state->finished; ++i) {
          Sample& s = (*samples)[i];
          const int index = static_cast<int>(i);
          if (!s.opened) {
            s.opened = true;
            if (std::string opening = answer->Opening(index, echo); !opening.empty()) {
              chunk += Event(opening);
            }
          }
          if (s.done) continue;
          std::vector<TokenEvent> tokens = std::move(s.pending);
          s.pending.clear();
          std::optional<FinishEvent> finish = std::move(s.finish);
          s.finish.reset();
          if (!finish.has_value()) {
            std::vector<TokenEvent> more;
            s.sink->Take(&more, &finish, wait);
            for (TokenEvent& t : more) tokens.push_back(std::move(t));
          }
          // Events of the reply's reader: content into `content`, calls as
          // their stream chunks (returned): a call's id and name once it
          // begins, then its arguments as they are written.
          auto split = [&](std::vector<ReplyReader::Event> events, std::string* content, std::string* reasoning) {
            std::string calls;
            for (ReplyReader::Event& e : events) {
              switch (e.kind) {
                case ReplyReader::Event::kContent: *content += e.text; break;
                case ReplyReader::Event::kReasoning: *reasoning += e.text; break;
                case ReplyReader::Event::kCallBegin: calls += answer->CallBeginChunk(index, e.index, e.call); break;
                case ReplyReader::Event::kArguments: calls += answer->CallArgumentsChunk(index, e.index, e.text); break;
                case ReplyReader::Event::kCall: break;  // all of it was streamed
              }
            }
            return calls;
          };
          if (!tokens.empty()) {
            std::string text;
            for (const TokenEvent& t : tokens) text += t.text;
            std::string content, calls, reasoning;
            if (s.reader == nullptr) {
              content = std::move(text);
            } else {
              calls = split(s.reader->Push(text), &content, &reasoning);
            }
            chunk += Event(answer->Chunk(index, content, tokens, nullptr, false, reasoning));
            chunk += calls;
          }
          if (!finish.has_value()) {
            all_done = false;
            continue;
          }
          if (absl::Status st = EndStatus(*finish); !st.ok()) {
            chunk += Event(OpenAiErrorBody(st));
            state->finished = true;
            for (Sample& other : *samples) {
              if (&other != &s && !other.finish.has_value()) (void)engine.Cancel(other.id);
            }
          } else if (s.reader == nullptr) {
            chunk += Event(answer->Chunk(index, finish->text, {}, &*finish));
            state->generated += finish->usage.generated_tokens;
          } else {
            std::vector<ReplyReader::Event> events = s.reader->Push(finish->text);
            for (ReplyReader::Event& e : s.reader->Finish()) events.push_back(std::move(e));
            std::string content, reasoning;
            const std::string calls = split(std::move(events), &content, &reasoning);
            const bool called = s.reader->calls() > 0;
            if (!content.empty() || !reasoning.empty()) {
              chunk += Event(answer->Chunk(index, content, {}, nullptr, false, reasoning));
            }
            chunk += calls;
            chunk += Event(answer->Chunk(index, "", {}, &*finish, called));
            state->generated += finish->usage.generated_tokens;
          }
          s.finish = std::move(finish);
          s.done = true;
        }
        if (all_done || state->finished) {
          if (!state->finished && include_usage) chunk += Event(answer->UsageChunk(state->generated));
          state->finished = true;
          chunk += "data: [DONE]\n\n";
        }
        // A failed write means the client left: the releaser cancels.
        if (!chunk.empty() && !out.write(chunk.data(), chunk.size())) return false;
        if (state->finished) out.done();
        return true;
      },
      [&engine, state, samples](bool) {
        if (state->finished) return;
        for (const Sample& s : *samples) (void)engine.Cancel(s.id);  // freed at the next step
      });
}

}  // namespace

void AddOpenAiRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                     const ApiKeys* keys) {
  Engine& engine = serving.engine;
  // With keys, a request without a valid one is answered 401 (and counted).
  auto authorized = [&engine, keys](const httplib::Request& req, httplib::Response& res) {
    absl::Status st = CheckApiKey(keys, engine, req.get_header_value("Authorization"));
    if (!st.ok()) Fail(res, st);
    return st.ok();
  };
  // Errors cpp-httplib answers itself take OpenAI's shape too: a body over
  // the port's limit (413, refused before it is read) and a path with no
  // route (404).
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      res.set_content(OpenAiErrorBody(absl::InvalidArgumentError(absl::StrCat(
                          "request body: larger than the limit of ", kMaxHttpBodyBytes, " bytes"))),
                      "application/json");
    } else if (res.status == 404 || res.status == 405) {
      res.set_content(
          OpenAiErrorBody(absl::NotFoundError(absl::StrCat(
              "no route for ", req.method, " ", req.path,
              " (this server serves POST /v1/completions, POST /v1/chat/completions, POST /v1/messages, "
              "POST /v1/messages/count_tokens, POST /v1/responses, POST /v1/embeddings (with --embeddings), GET "
              "/v1/models, POST /tokenize, POST /detokenize, GET /health)"))),
          "application/json");
    }
  });
  const int64_t started = absl::ToUnixSeconds(absl::Now());
  http.Get("/health", [&engine](const httplib::Request&, httplib::Response& res) {
    const bool ok = engine.Accepting() && engine.FatalError().ok();
    res.status = ok ? 200 : 503;
    res.set_content(JsonText(Json{{"status", ok ? "ok" : "unavailable"}}), "application/json");
  });
  http.Get("/v1/models", [&engine, model_name, started, authorized](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!authorized(req, res)) return;
    const Json model = {{"id", model_name},
                               {"object", "model"},
                               {"created", started},
                               {"owned_by", "flover"},
                               {"max_model_len", engine.options().max_seq_len},
                               {"vocab_size", engine.model().info().vocab_size}};
    res.set_content(JsonText(Json{{"object", "list"}, {"data", Json::array({model})}}),
                    "application/json");
  });
  // vLLM's and llama-server's /tokenize: {"prompt"} (or llama-server's
  // "content") as text, or {"messages"} through the chat template; the
  // tokens, their count and the context length. /detokenize: {"tokens"}
  // back to text ("prompt", and "content" for llama-server's clients).
  http.Post("/tokenize", [serving, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    auto parsed = ParseTokenizeRequest(req.body);
    if (!parsed.ok()) return Fail(res, CountRefusal(serving.engine, parsed.status()));
    auto request = ToEngineRequest(*parsed, serving.convert(), /*random_seed=*/0);
    if (!request.ok()) return Fail(res, CountRefusal(serving.engine, request.status()));
    res.set_content(JsonText(Json{{"tokens", request->prompt},
                                         {"count", request->prompt.size()},
                                         {"max_model_len", serving.engine.options().max_seq_len}}),
                    "application/json");
  });
  http.Post("/detokenize", [serving, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    auto ids = ParseDetokenizeRequest(req.body, serving.engine.model().info().vocab_size);
    if (!ids.ok()) return Fail(res, CountRefusal(serving.engine, ids.status()));
    if (serving.tokenizer == nullptr) {
      return Fail(res, CountRefusal(serving.engine,
                                    FieldError("tokens", "the model has no tokenizer",
                                               absl::StatusCode::kFailedPrecondition)));
    }
    const std::string text = serving.tokenizer->Decode(*ids);
    res.set_content(JsonText(Json{{"prompt", text}, {"content", text}}), "application/json");
  });
  for (const bool is_chat : {false, true}) {
    http.Post(is_chat ? "/v1/chat/completions" : "/v1/completions",
              [&engine, serving, model_name, authorized, is_chat](const httplib::Request& req,
                                                                          httplib::Response& res) {
                if (!authorized(req, res)) return;
                auto parsed = is_chat ? ParseChatRequest(req.body, model_name)
                                      : ParseCompletionRequest(req.body, model_name);
                if (!parsed.ok()) return Fail(res, CountRefusal(engine, parsed.status()));
                Serve(res, serving, model_name, *parsed, is_chat);
              });
  }
}

}  // namespace flover::server
