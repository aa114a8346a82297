#include "server/embeddings_api.h"

#include <httplib.h>

#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/json_body.h"
#include "server/openai_request.h"
#include "server/reply_stream.h"
#include "server/status_util.h"
#include "util/field_error.h"
#include "util/status_macros.h"

namespace flover::server {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) { return FieldError(field, why); }

void Fail(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status);
  res.set_content(OpenAiErrorBody(status), "application/json");
}

// A list of token ids, or nullopt when `v` is not one.
absl::StatusOr<std::optional<std::vector<int32_t>>> TokenList(const Json& v, const std::string& at) {
  if (!v.is_array() || v.empty() || !v.front().is_number()) return std::optional<std::vector<int32_t>>();
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    auto id = JsonInteger(v[i], absl::StrCat(at, "[", i, "]"), 0, INT32_MAX, "must be a token id (an integer >= 0)");
    if (!id.ok()) return id.status();
    ids.push_back(static_cast<int32_t>(*id));
  }
  return std::optional<std::vector<int32_t>>(std::move(ids));
}

}  // namespace

absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(absl::string_view body, absl::string_view served_model) {
  auto parsed = ParseJsonObjectBody(body, "request body");
  if (!parsed.ok()) return parsed.status();
  const Json& b = *parsed;
  FLOVER_RETURN_IF_ERROR(
      CheckKnownFields(b, {"model", "input", "encoding_format", "dimensions", "user"}, "an embeddings"));
  FLOVER_RETURN_IF_ERROR(CheckServedModel(b, served_model, /*required=*/false));
  EmbeddingsRequest out;
  const Json* input = JsonField(b, "input");
  if (input == nullptr) return Bad("input", "is required");
  if (input->is_string()) {
    out.texts.push_back(input->get<std::string>());
  } else if (input->is_array()) {
    if (input->empty()) return Bad("input", "is an empty list");
    auto ids = TokenList(*input, "input");
    if (!ids.ok()) return ids.status();
    if (ids->has_value()) {
      out.token_ids.push_back(std::move(**ids));
    } else {
      if (input->size() > static_cast<size_t>(kMaxEmbeddingInputs)) {
        return Bad("input", absl::StrCat("at most ", kMaxEmbeddingInputs, " inputs, got ", input->size()));
      }
      for (size_t i = 0; i < input->size(); ++i) {
        const Json& one = (*input)[i];
        const std::string at = absl::StrCat("input[", i, "]");
        if (one.is_string()) {
          if (!out.token_ids.empty()) return Bad(at, "is text, and the inputs before it token ids: send one kind");
          out.texts.push_back(one.get<std::string>());
          continue;
        }
        auto list = TokenList(one, at);
        if (!list.ok()) return list.status();
        if (!list->has_value()) return Bad(at, "must be a string or a non-empty list of token ids");
        if (!out.texts.empty()) return Bad(at, "is token ids, and the inputs before it text: send one kind");
        out.token_ids.push_back(std::move(**list));
      }
    }
  } else {
    return Bad("input", "must be a string, a list of strings, a list of token ids, or a list of such lists");
  }
  if (const Json* f = JsonField(b, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) return Bad("encoding_format", "must be \"float\" or \"base64\"");
    out.base64 = *f == "base64";
  }
  if (const Json* d = JsonField(b, "dimensions")) {
    auto dims = JsonInteger(*d, "dimensions", 1, INT32_MAX, "must be a positive integer");
    if (!dims.ok()) return dims.status();
    out.dimensions = static_cast<int>(*dims);
  }
  if (const Json* u = JsonField(b, "user"); u != nullptr && !u->is_string()) return Bad("user", "must be a string");
  return out;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> EmbeddingPrompts(const ServingContext& serving,
                                                                   const std::vector<std::string>& texts,
                                                                   std::vector<std::vector<int32_t>> token_ids) {
  std::vector<std::vector<int32_t>> prompts = std::move(token_ids);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string at = texts.size() > 1 ? absl::StrCat("input[", i, "]") : "input";
    if (serving.tokenizer == nullptr) {
      return FieldError(at, "the model has no tokenizer: send token ids", absl::StatusCode::kFailedPrecondition);
    }
    auto ids = serving.tokenizer->Encode(texts[i], /*add_special_tokens=*/true);
    if (!ids.ok()) return FieldError(at, ids.status().message());
    if (ids->empty()) return FieldError(at, "has no tokens (an empty text, and the model appends none)");
    prompts.push_back(std::move(*ids));
  }
  return prompts;
}

namespace {

// One request's inputs in the engine: each one's sink records its vector;
// the last to finish calls `done`.
class EmbeddingBatch : public std::enable_shared_from_this<EmbeddingBatch> {
 public:
  EmbeddingBatch(Engine& engine, size_t n, EmbeddingsDone done)
      : engine_(engine), vectors_(n), ids_(n, 0), left_(n), done_(std::move(done)) {}

  class Sink final : public TokenSink {
   public:
    Sink(std::shared_ptr<EmbeddingBatch> batch, size_t index) : batch_(std::move(batch)), index_(index) {}
    void OnToken(RequestId, const TokenEvent&) override {}
    void OnFinish(RequestId, const FinishEvent& e) override { batch_->Finished(index_, e); }

   private:
    std::shared_ptr<EmbeddingBatch> batch_;
    const size_t index_;
  };

  void Submit(std::vector<std::vector<int32_t>> prompts, const std::function<void(Request&)>& configure) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      Request r;
      r.prompt = std::move(prompts[i]);  // (the engine gives it one position of room)
      configure(r);
      auto id = engine_.Submit(std::move(r), std::make_shared<Sink>(shared_from_this(), i));
      if (!id.ok()) {
        const absl::Status st = id.status();
        Fail(ErrorField(st) == "prompt"
                 ? FieldError(prompts.size() > 1 ? absl::StrCat("input[", i, "]") : "input", st.message(), st.code())
                 : st);
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      ids_[i] = *id;
    }
  }

 private:
  void Finished(size_t index, const FinishEvent& e) {
    absl::Status st = EndStatus(e);
    const std::vector<float>& values = e.embedding.empty() ? e.logits : e.embedding;
    if (st.ok() && values.empty()) st = absl::InternalError("no embedding or scores came back");
    if (!st.ok()) return Fail(st);
    EmbeddingsDone done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      vectors_[index] = values;
      if (--left_ > 0 || !done_) return;
      done = std::move(done_);
    }
    done(std::move(vectors_));
  }
  // The first failure answers; the inputs still running are cancelled.
  void Fail(const absl::Status& st) {
    EmbeddingsDone done;
    std::vector<RequestId> running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_) return;
      done = std::move(done_);
      for (size_t i = 0; i < ids_.size(); ++i) {
        if (ids_[i] != 0 && vectors_[i].empty()) running.push_back(ids_[i]);
      }
    }
    for (RequestId id : running) (void)engine_.Cancel(id);  // (finished ones are ignored)
    done(st);
  }

  Engine& engine_;
  std::mutex mu_;
  std::vector<std::vector<float>> vectors_;
  std::vector<RequestId> ids_;
  size_t left_;
  EmbeddingsDone done_;  // empty once called
};

}  // namespace

void SubmitEmbeddings(Engine& engine, std::vector<std::vector<int32_t>> prompts, const Pooling& pooling,
                      int dimensions, EmbeddingsDone done) {
  auto batch = std::make_shared<EmbeddingBatch>(engine, prompts.size(), std::move(done));
  batch->Submit(std::move(prompts), [&](Request& r) {
    r.embed = pooling;
    r.embed_dims = dimensions;
  });
}

void SubmitScores(Engine& engine, std::vector<std::vector<int32_t>> prompts, std::vector<int32_t> score_tokens,
                  EmbeddingsDone done) {
  auto batch = std::make_shared<EmbeddingBatch>(engine, prompts.size(), std::move(done));
  batch->Submit(std::move(prompts), [&](Request& r) { r.score_tokens = score_tokens; });
}

void AddEmbeddingsRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                         const ApiKeys* keys) {
  Engine& engine = serving.engine;
  const Pooling pooling = serving.pooling.value_or(Pooling{});
  http.Post("/v1/embeddings", [serving, model_name, pooling, keys, &engine](const httplib::Request& req,
                                                                            httplib::Response& res) {
    if (absl::Status st = CheckApiKey(keys, engine, req.get_header_value("Authorization")); !st.ok()) {
      return Fail(res, st);
    }
    auto parsed = ParseEmbeddingsRequest(req.body, model_name);
    if (!parsed.ok()) return Fail(res, CountRefusal(engine, parsed.status()));
    auto prompts = EmbeddingPrompts(serving, parsed->texts, std::move(parsed->token_ids));
    if (!prompts.ok()) return Fail(res, CountRefusal(engine, prompts.status()));
    int64_t prompt_tokens = 0;
    for (const auto& p : *prompts) prompt_tokens += static_cast<int64_t>(p.size());
    // (A prompt's steps, nothing generated: the worker waits for them.)
    std::promise<absl::StatusOr<std::vector<std::vector<float>>>> promise;
    auto future = promise.get_future();
    SubmitEmbeddings(engine, std::move(*prompts), pooling, parsed->dimensions,
                     [&promise](absl::StatusOr<std::vector<std::vector<float>>> v) { promise.set_value(std::move(v)); });
    auto vectors = future.get();
    if (!vectors.ok()) return Fail(res, vectors.status());
    Json data = Json::array();
    for (size_t i = 0; i < vectors->size(); ++i) {
      const std::vector<float>& v = (*vectors)[i];
      Json vector;
      if (parsed->base64) {
        std::string bytes(v.size() * sizeof(float), '\0');
        std::memcpy(bytes.data(), v.data(), bytes.size());  // x86-64: little-endian, as OpenAI's
        vector = absl::Base64Escape(bytes);
      } else {
        vector = v;
      }
      data.push_back(Json{{"object", "embedding"}, {"index", i}, {"embedding", std::move(vector)}});
    }
    res.set_content(JsonText(Json{{"object", "list"},
                                  {"data", std::move(data)},
                                  {"model", model_name},
                                  {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}),
                    "application/json");
  });
}

}  // namespace flover::server
