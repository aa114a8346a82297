// OpenAI's embeddings over the same engine: POST /v1/embeddings (with
// --embeddings). Each input is an embedding request (engine/request.h:
// Request::embed), a prompt-only sequence in the same fused steps as chat,
// its vector the model's final hidden rows pooled as the model's files say
// (or --pooling). Text goes through the tokenizer as the model's own
// post-processor has it (Qwen3-Embedding's <|endoftext|> appended); an
// instruction prefix (Qwen3-Embedding's "Instruct: {task}\nQuery:") is the
// client's to write, as with the model's sentence-transformers config.
#ifndef FLOVER_SERVER_EMBEDDINGS_API_H_
#define FLOVER_SERVER_EMBEDDINGS_API_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/pooling.h"
#include "server/api_keys.h"
#include "server/request_session.h"

namespace httplib {
class Server;
}

namespace flover::server {

// The most inputs one request may hold (OpenAI's limit).
inline constexpr int kMaxEmbeddingInputs = 2048;

// A parsed /v1/embeddings body: its inputs as text or as token ids (one of
// the two), how the vectors come back, and how many values each keeps.
struct EmbeddingsRequest {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> token_ids;
  bool base64 = false;  // encoding_format "base64": little-endian float32 bytes
  int dimensions = 0;   // 0: all (Matryoshka models: the first N, renormalised)
};

// model (only `served_model`: NotFound otherwise), input (a string, a list
// of strings, a list of token ids, or a list of such lists; a text may be
// empty where the model appends a token, as Qwen3-Embedding appends EOS),
// encoding_format (float, base64), dimensions, user (ignored). Anything
// else is refused naming the field.
absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(absl::string_view body, absl::string_view served_model);

// The inputs as prompts: texts through the tokenizer (with the model's
// special tokens: Qwen3-Embedding's appended EOS), token ids as they are.
// Errors name the input ("input", or "input[2]" among several).
absl::StatusOr<std::vector<std::vector<int32_t>>> EmbeddingPrompts(const ServingContext& serving,
                                                                   const std::vector<std::string>& texts,
                                                                   std::vector<std::vector<int32_t>> token_ids);

// The vectors of `prompts`, in order, or why not: called once, on the
// engine's thread, when the last one finishes (or at once, on the caller's,
// when the engine refuses one; the others are then cancelled).
using EmbeddingsDone = std::function<void(absl::StatusOr<std::vector<std::vector<float>>>)>;
// Submits every prompt at once (so the engine fuses them, and with what
// else runs), each pooled with `pooling` and cut to `dimensions` (0: all).
void SubmitEmbeddings(Engine& engine, std::vector<std::vector<int32_t>> prompts, const Pooling& pooling,
                      int dimensions, EmbeddingsDone done);

// The same for scoring requests (Request::score_tokens): each prompt's
// logits of `score_tokens` at its last position.
void SubmitScores(Engine& engine, std::vector<std::vector<int32_t>> prompts, std::vector<int32_t> score_tokens,
                  EmbeddingsDone done);

// Registers POST /v1/embeddings on `http`: every input pooled with
// serving.pooling (set: the server takes embeddings).
void AddEmbeddingsRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                         const ApiKeys* keys = nullptr);

}  // namespace flover::server

#endif  // FLOVER_SERVER_EMBEDDINGS_API_H_
