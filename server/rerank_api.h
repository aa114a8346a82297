// Rerank over the same engine: POST /v1/rerank and /rerank (with --rerank),
// the Jina / Cohere shape llama-server and vLLM serve. Each (query,
// document) pair is Qwen3-Reranker's prompt (its model card's: a system
// turn that asks for "yes" or "no", the instruction, query and document,
// then an empty think block), computed as a scoring request
// (Request::score_tokens) in the same fused steps as chat; its relevance is
// sigmoid(logit("yes") - logit("no")) at the prompt's last position, as the
// model card, llama.cpp and vLLM compute it.
#ifndef FLOVER_SERVER_RERANK_API_H_
#define FLOVER_SERVER_RERANK_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/loader/gguf.h"
#include "server/api_keys.h"
#include "server/request_session.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace flover::server {

// The most documents one request may rank.
inline constexpr int kMaxRerankDocuments = 1024;

// Qwen3-Reranker's prompt and how its answer is read: the model's logits of
// its two answer tokens, or, for llama.cpp's reranker GGUF files (which
// drop an untied lm_head and keep those two rows as `cls.output`), the
// final hidden row times those rows.
struct RerankFormat {
  int32_t yes = -1, no = -1;
  std::vector<float> head_yes, head_no;  // cls.output's rows; empty: the logits
  std::string default_instruction;
  // The prompt's text for one pair.
  std::string Prompt(absl::string_view instruction, absl::string_view query, absl::string_view document) const;
};
// FailedPrecondition naming what the vocabulary lacks ("yes" and "no" as
// one token each).
absl::StatusOr<RerankFormat> Qwen3RerankFormat(const Tokenizer& tokenizer);
// A GGUF file's reranker head (llama.cpp's converter: pooling_type 4,
// classifier.output_labels ["yes", "no"], cls.output.weight [2, hidden]):
// the format with those rows, or nullopt for a file that has none.
absl::StatusOr<std::optional<RerankFormat>> GgufRerankFormat(const GgufFile& file, int hidden);

struct RerankRequest {
  std::string query;
  std::vector<std::string> documents;
  std::optional<int> top_n;          // default: every document
  std::optional<std::string> instruction;  // Flover's: the task, else the model card's default
  bool return_documents = false;
};

// model (only `served_model`: NotFound otherwise), query, documents (strings,
// or objects with "text"), top_n, return_documents, instruction. Anything
// else is refused naming the field.
absl::StatusOr<RerankRequest> ParseRerankRequest(absl::string_view body, absl::string_view served_model);

// Registers POST /v1/rerank and /rerank on `http`.
void AddRerankRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                     RerankFormat format, const ApiKeys* keys = nullptr);

}  // namespace flover::server

#endif  // FLOVER_SERVER_RERANK_API_H_
