#include "server/rerank_api.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <numeric>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/loader/gguf.h"
#include "model/pooling.h"
#include "server/embeddings_api.h"
#include "server/json_body.h"
#include "server/openai_request.h"
#include "server/reply_stream.h"
#include "server/status_util.h"
#include "util/field_error.h"
#include "util/status_macros.h"

namespace flover::server {
namespace {

constexpr char kPrefix[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
constexpr char kSuffix[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
constexpr char kDefaultInstruction[] = "Given a web search query, retrieve relevant passages that answer the query";

absl::Status Bad(absl::string_view field, absl::string_view why) { return FieldError(field, why); }

void Fail(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status);
  res.set_content(OpenAiErrorBody(status), "application/json");
}

}  // namespace

std::string RerankFormat::Prompt(absl::string_view instruction, absl::string_view query,
                                 absl::string_view document) const {
  return absl::StrCat(kPrefix, "<Instruct>: ", instruction, "\n<Query>: ", query, "\n<Document>: ", document, kSuffix);
}

absl::StatusOr<RerankFormat> Qwen3RerankFormat(const Tokenizer& tokenizer) {
  RerankFormat f;
  f.default_instruction = kDefaultInstruction;
  for (auto [word, id] : {std::pair{"yes", &f.yes}, std::pair{"no", &f.no}}) {
    auto ids = tokenizer.Encode(word, /*add_special_tokens=*/false);
    if (!ids.ok() || ids->size() != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("--rerank: the vocabulary does not spell \"", word,
                       "\" as one token (Qwen3-Reranker scores the logits of \"yes\" and \"no\")"));
    }
    *id = (*ids)[0];
  }
  return f;
}

absl::StatusOr<std::optional<RerankFormat>> GgufRerankFormat(const GgufFile& file, int hidden) {
  const std::string& path = file.name();
  const GgufTensor* cls = file.FindTensor("cls.output.weight");
  if (cls == nullptr) return std::optional<RerankFormat>();
  FLOVER_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  const std::string labels_key = arch + ".classifier.output_labels";
  auto labels = file.GetStrings(labels_key);
  if (!labels.ok() || **labels != std::vector<std::string>{"yes", "no"}) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": cls.output.weight is read as Qwen3-Reranker's (yes, no) rows, and ", labels_key,
        " does not say [\"yes\", \"no\"]"));
  }
  if (cls->cols() != hidden || cls->rows() != 2) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": cls.output.weight is [", cls->rows(), ", ",
                                                      cls->cols(), "], not [2, ", hidden, "]"));
  }
  FLOVER_ASSIGN_OR_RETURN(std::vector<float> rows, file.ReadRows(*cls, 0, 2));
  RerankFormat f;
  f.default_instruction = kDefaultInstruction;
  f.head_yes.assign(rows.begin(), rows.begin() + hidden);
  f.head_no.assign(rows.begin() + hidden, rows.end());
  return std::optional<RerankFormat>(std::move(f));
}

absl::StatusOr<RerankRequest> ParseRerankRequest(absl::string_view body, absl::string_view served_model) {
  auto parsed = ParseJsonObjectBody(body, "request body");
  if (!parsed.ok()) return parsed.status();
  const Json& b = *parsed;
  FLOVER_RETURN_IF_ERROR(CheckKnownFields(
      b, {"model", "query", "documents", "top_n", "return_documents", "instruction"}, "a rerank"));
  FLOVER_RETURN_IF_ERROR(CheckServedModel(b, served_model, /*required=*/false));
  RerankRequest out;
  const Json* query = JsonField(b, "query");
  if (query == nullptr || !query->is_string()) return Bad("query", "is required, a string");
  out.query = query->get<std::string>();
  const Json* docs = JsonField(b, "documents");
  if (docs == nullptr || !docs->is_array() || docs->empty()) return Bad("documents", "is required, a non-empty list");
  if (docs->size() > static_cast<size_t>(kMaxRerankDocuments)) {
    return Bad("documents", absl::StrCat("at most ", kMaxRerankDocuments, ", got ", docs->size()));
  }
  for (size_t i = 0; i < docs->size(); ++i) {
    const Json& d = (*docs)[i];
    const std::string at = absl::StrCat("documents[", i, "]");
    if (d.is_string()) {
      out.documents.push_back(d.get<std::string>());
    } else if (d.is_object() && d.contains("text") && d["text"].is_string()) {
      out.documents.push_back(d["text"].get<std::string>());
    } else {
      return Bad(at, "must be a string or an object with a string \"text\"");
    }
  }
  if (const Json* n = JsonField(b, "top_n")) {
    auto top = JsonInteger(*n, "top_n", 1, INT32_MAX, "must be a positive integer");
    if (!top.ok()) return top.status();
    out.top_n = static_cast<int>(*top);
  }
  auto docs_back = JsonBool(b, "return_documents", false, "return_documents");
  if (!docs_back.ok()) return docs_back.status();
  out.return_documents = *docs_back;
  if (const Json* in = JsonField(b, "instruction")) {
    if (!in->is_string() || in->get<std::string>().empty()) return Bad("instruction", "must be a non-empty string");
    out.instruction = in->get<std::string>();
  }
  return out;
}

void AddRerankRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                     RerankFormat format, const ApiKeys* keys) {
  Engine& engine = serving.engine;
  auto handler = [serving, model_name, format, keys, &engine](const httplib::Request& req, httplib::Response& res) {
    if (absl::Status st = CheckApiKey(keys, engine, req.get_header_value("Authorization")); !st.ok()) {
      return Fail(res, st);
    }
    auto parsed = ParseRerankRequest(req.body, model_name);
    if (!parsed.ok()) return Fail(res, CountRefusal(engine, parsed.status()));
    std::vector<std::vector<int32_t>> prompts;
    int64_t prompt_tokens = 0;
    const std::string instruction = parsed->instruction.value_or(format.default_instruction);
    for (size_t i = 0; i < parsed->documents.size(); ++i) {
      // The whole text at once, its special tokens read as such (as
      // llama.cpp tokenizes its rerank template).
      auto ids = serving.tokenizer->Encode(format.Prompt(instruction, parsed->query, parsed->documents[i]),
                                           /*add_special_tokens=*/false);
      if (!ids.ok()) return Fail(res, CountRefusal(engine, FieldError(absl::StrCat("documents[", i, "]"), ids.status().message())));
      prompt_tokens += static_cast<int64_t>(ids->size());
      prompts.push_back(std::move(*ids));
    }
    std::promise<absl::StatusOr<std::vector<std::vector<float>>>> promise;
    auto future = promise.get_future();
    auto answer = [&promise](absl::StatusOr<std::vector<std::vector<float>>> v) { promise.set_value(std::move(v)); };
    const bool head = !format.head_yes.empty();
    if (head) {  // the last position's final hidden row, as it is
      SubmitEmbeddings(engine, std::move(prompts), Pooling{Pooling::Kind::kLast, false}, 0, answer);
    } else {     // the logits of yes and no there
      SubmitScores(engine, std::move(prompts), {format.yes, format.no}, answer);
    }
    auto logits = future.get();
    if (!logits.ok()) {
      const absl::Status st = logits.status();
      // An input the engine refused: the document it came from.
      const std::string field = ErrorField(st);
      if (absl::StartsWith(field, "input[")) {
        return Fail(res, FieldError(absl::StrCat("documents", field.substr(5)), st.message(), st.code()));
      }
      return Fail(res, field == "input" ? FieldError("documents[0]", st.message(), st.code()) : st);
    }
    std::vector<double> score(logits->size());
    for (size_t i = 0; i < score.size(); ++i) {
      const std::vector<float>& v = (*logits)[i];
      double diff = 0;
      if (head) {
        for (size_t c = 0; c < v.size(); ++c) diff += double{v[c]} * (double{format.head_yes[c]} - format.head_no[c]);
      } else {
        diff = double{v[0]} - double{v[1]};
      }
      score[i] = 1.0 / (1.0 + std::exp(-diff));  // softmax([no, yes])[yes]
    }
    std::vector<size_t> order(score.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
    order.resize(std::min(order.size(), static_cast<size_t>(parsed->top_n.value_or(static_cast<int>(order.size())))));
    Json results = Json::array();
    for (size_t i : order) {
      Json r = {{"index", i}, {"relevance_score", score[i]}};
      if (parsed->return_documents) r["document"] = {{"text", parsed->documents[i]}};
      results.push_back(std::move(r));
    }
    res.set_content(JsonText(Json{{"model", model_name},
                                  {"object", "list"},
                                  {"results", std::move(results)},
                                  {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}),
                    "application/json");
  };
  http.Post("/v1/rerank", handler);
  http.Post("/rerank", handler);
}

}  // namespace flover::server
