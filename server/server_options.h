// Everything the server is configured with, with its defaults; filled from
// flags in main.cc only.
#ifndef FLOVER_SERVER_SERVER_OPTIONS_H_
#define FLOVER_SERVER_SERVER_OPTIONS_H_

#include <string>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "kernels/backend.h"
#include "server/image_fetch.h"

namespace flover::server {

// The model served without --model (tools/setup.sh fetches it), by its
// served name.
inline constexpr char kDefaultModelName[] = "SmolLM2-135M-Instruct";

// The largest request body the HTTP ports read (gRPC's message limit).
inline constexpr size_t kMaxHttpBodyBytes = 4 << 20;

// PEM files; cert and key together, client_ca (mutual TLS) only with them.
struct TlsFiles {
  std::string cert, key, client_ca;
  bool enabled() const { return !cert.empty(); }
};

struct ServerOptions {
  std::string model;                         // a GGUF file, a directory or builtin:NAME
  std::string mmproj;                        // --mmproj: llama.cpp's projector file beside a GGUF model
  bool default_model = false;                // `model` is the default (SmolLM2), not --model
  std::string served_model_name;             // the model's id in the OpenAI API
  std::string chat_template;                 // --chat_template: a file replacing the model's
  std::string tool_call_parser;              // --tool_call_parser: hermes, llama3_json, mistral
  std::string reasoning_parser = "auto";     // --reasoning_parser: auto, none, think
  size_t responses_store = 1000;             // --responses_store: /v1/responses kept for previous_response_id
  bool embeddings = false;                   // --embeddings: serve /v1/embeddings (engine.embeddings too)
  std::string pooling = "auto";              // --pooling: auto (the model's files), last, mean, cls
  bool rerank = false;                       // --rerank: serve /v1/rerank and /rerank (Qwen3-Reranker)
  std::string listen = "127.0.0.1:50051";    // port 0 picks a free port
  int threads = 0;                           // CPU threads per rank; 0 = cores / local ranks
  int tp = 1;                                // tensor-parallel ranks (mpirun -np tp)
  kernels::BackendOptions backend;           // --device, --dtype (linear layers), --kv_dtype
  EngineOptions engine;                      // max_seq_len 0 = the model's positions
  std::string draft_model;                   // --speculative=draft: its model (else empty)
  kernels::BackendOptions draft_backend;     // its backend: --device, --draft_dtype, --kv_dtype
  absl::Duration drain_timeout = absl::Seconds(30);
  TlsFiles tls;                              // for the gRPC and HTTP ports; off when empty
  std::string api_key_file;                  // keys, one per line; empty = no authentication
  std::string metrics_listen;                // HOST:PORT for /metrics; empty = off
  std::string http_listen;                   // HOST:PORT for the OpenAI API; empty = off
  int http_threads = 64;                     // HTTP requests served at once
  int max_image_tokens = 4096;               // --max_image_tokens: an image's rows, where the model sizes images
  ImageFetchOptions image_fetch;             // --image_url_hosts: where remote images may come from
};

}  // namespace flover::server

#endif  // FLOVER_SERVER_SERVER_OPTIONS_H_
