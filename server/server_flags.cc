#include "server/server_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "kernels/backend_factory.h"
#include "kernels/backend_flags.h"
#include "model/model_loader.h"
#include "server/http_server.h"
#include "server/tls.h"
#include "util/byte_size.h"
#include "util/file_util.h"
#include "util/runfiles.h"

ABSL_FLAG(std::string, model, "",
          "A GGUF file, a Hugging Face model directory, or builtin:NAME; empty: SmolLM2-135M-Instruct "
          "(models/, fetched by tools/setup.sh)");
ABSL_FLAG(std::string, mmproj, "",
          "With a GGUF --model: llama.cpp's mmproj file of its vision tower (Qwen3-VL's qwen3vl_merger, Gemma 3's "
          "gemma3 or SmolVLM's idefics3), so the "
          "model takes images");
ABSL_FLAG(std::string, served_model_name, "",
          "The model's id in the OpenAI API (what clients send as `model`; /v1/models lists it); "
          "empty: the GGUF file's name, else --model");
ABSL_FLAG(std::string, chat_template, "",
          "A Jinja chat template file to use instead of the model's own");
ABSL_FLAG(std::string, reasoning_parser, "auto",
          "How chat replies' reasoning is split from their answer (reasoning_content): think "
          "(<think>...</think>: Qwen3 / 3.5, SmolLM3, DeepSeek-R1), harmony (gpt-oss's channels), gemma4 "
          "(Gemma 4's <|channel>thought...<channel|>), none (the text as it is), or auto (from the chat "
          "template's tags)");
ABSL_FLAG(bool, embeddings, false,
          "Serve POST /v1/embeddings: each input a prompt-only sequence in the same fused steps as "
          "chat, its final hidden rows pooled (--pooling); the model keeps its hidden rows of every "
          "step (one rank)");
ABSL_FLAG(std::string, pooling, "auto",
          "--embeddings: how a sequence's hidden rows become one vector: last, mean or cls, "
          "L2-normalised; auto: as the model's files say (sentence-transformers' modules.json and "
          "1_Pooling, GGUF's pooling_type), else last");
ABSL_FLAG(bool, rerank, false,
          "Serve POST /v1/rerank and /rerank (Jina / Cohere shape): each (query, document) pair as "
          "Qwen3-Reranker's prompt, scored sigmoid(logit(yes) - logit(no)) at its last position, in the "
          "same fused steps as chat");
ABSL_FLAG(int, responses_store, 1000,
          "/v1/responses: how many stored responses (store: true) are kept in memory for "
          "previous_response_id and GET, the least recently used evicted first (0: none)");
ABSL_FLAG(std::string, tool_call_parser, "",
          "How replies write tool calls: hermes, llama3_json, mistral or gemma4 (empty: from the chat template's "
          "markers; hermes for a template without tools, which are then described to the model in its "
          "system message)");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "Address to serve on; port 0 picks a free port");
ABSL_FLAG(int, threads, 0,
          "CPU threads for the model per rank (0 = the cores divided by the ranks on this node)");
ABSL_FLAG(int, tp, 1, "Tensor-parallel ranks; > 1 needs mpirun -np TP (rank 0 serves gRPC)");
ABSL_FLAG(int, max_batch, 128, "Most sequences running at once (the KV cache's memory decides how many fit)");
ABSL_FLAG(int, max_seq_len, 0,
          "Most positions one sequence may reach, prompt + output (0 = the model's context); "
          "nothing is reserved for it. Past a LongRoPE model's original context (Phi-3.5, "
          "Phi-4-mini), its long factors at every position, to max_position_embeddings");
ABSL_FLAG(std::string, kv_cache_memory, "",
          "The KV cache's memory per rank, e.g. 4GiB or 512MiB (empty: on a GPU "
          "--gpu_memory_fraction of what is free after the weights; on the CPU 4 GiB; either "
          "at most what --max_batch sequences of --max_seq_len positions fill)");
ABSL_FLAG(double, gpu_memory_fraction, 0.9,
          "Without --kv_cache_memory on a GPU: the share of its free memory (after weights and "
          "work space) the KV cache takes");
ABSL_FLAG(bool, kv_free_behind_window, true,
          "Where every layer of the model has a sliding window (Mistral), give back each "
          "sequence's KV blocks wholly behind it, so a sequence holds one window, not its whole "
          "context; false keeps them to the end (to measure what that saves)");
ABSL_FLAG(bool, prefix_caching, true,
          "Reuse the computed K/V of prompts' leading tokens (shared system prompts, earlier "
          "turns of a chat); finished sequences' blocks stay cached until memory is needed");
ABSL_FLAG(int, state_checkpoint_interval, 1024,
          "Models with recurrent layers (Qwen3.5, LFM2): keep a sequence's state as a prefix checkpoint "
          "every this many prompt positions (a multiple of 32; 0: only at each prompt's last 32-position "
          "boundary), so a later prompt with that prefix resumes from it instead of computing it");
ABSL_FLAG(int, max_tokens_per_step, 256, "Token budget of one fused forward (prompts are chunked)");
ABSL_FLAG(std::string, scheduler, "fusion", "fusion, dynamic, static or sequential");
ABSL_FLAG(int, batch_delay_ms, 10, "dynamic scheduler: how long to gather a batch");
ABSL_FLAG(int, max_queue, 1024, "Waiting requests; more are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_image_tokens, 4096,
          "Most tokens one image becomes where the model sizes images itself (Qwen3-VL, Qwen3.5: larger ones are "
          "resized down, as the processor's max_pixels does); bounds the vision encoder's memory and time");
ABSL_FLAG(std::string, image_url_hosts, "",
          "Comma-separated hosts (host or host:port) the server may fetch images from, for image_url parts and "
          "Messages API url sources with http(s) URLs; empty (the default): only images sent inline are taken");
ABSL_FLAG(int, max_new_tokens_limit, 4096, "Largest max_new_tokens a request may ask for");
ABSL_FLAG(std::string, speculative, "off",
          "Speculative decoding: off, ngram (draft tokens from earlier occurrences of each "
          "sequence's last tokens), draft (a draft model's greedy tokens: --draft_model) or mtp "
          "(the model's own multi-token-prediction layer: Qwen3.5's; one rank), verified in the "
          "fused step; outputs are bitwise the same");
ABSL_FLAG(std::string, draft_model, "",
          "--speculative=draft: the model that drafts (a GGUF file, a directory or builtin:NAME with "
          "the model's vocabulary: the same file in native blocks for an f32 or bf16 model, or a "
          "smaller one of its family), on rank 0's device with a KV cache of its own");
ABSL_FLAG(std::string, draft_dtype, "auto", "--draft_model's linear layers, as --dtype reads it");
ABSL_FLAG(int, num_speculative_tokens, 6, "--speculative: most draft tokens per sequence and step");
ABSL_FLAG(int, speculative_max_rows, 12,
          "--speculative: rows of a step (decodes and drafts) past which nobody drafts, so "
          "large batches run as without speculation");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on at /metrics (empty = off; port 0 picks a "
          "free port)");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT to serve the OpenAI-compatible HTTP API on (/v1/completions, /v1/models, "
          "/health; empty = off; port 0 picks a free port)");
ABSL_FLAG(int, http_threads, 64,
          "HTTP worker threads: each in-flight HTTP request holds one (gRPC has no such limit)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) for TLS on the gRPC and HTTP ports; with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA: require client certificates it signed (mutual TLS); needs --tls_cert");
ABSL_FLAG(std::string, api_key_file, "",
          "File of API keys, one per line: every call (gRPC and /v1/* over HTTP; not health, "
          "reflection or metrics) needs 'authorization: Bearer KEY'. Re-read on SIGHUP");
ABSL_FLAG(double, drain_timeout_s, 30, "On SIGTERM/SIGINT, how long in-flight requests may run");

namespace flover::server {
namespace {

// Where tools/setup.sh puts the default model: models/ in the clone, which
// a binary built there finds in its Bazel runfiles (or, run from the
// clone's root, under the current directory).
constexpr char kDefaultModelFile[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

absl::StatusOr<std::string> DefaultModel() {
  std::string path = FindRunfile("", "", kDefaultModelFile);
  if (path.empty() && FileExists(kDefaultModelFile)) path = kDefaultModelFile;
  if (path.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no --model given, and the default model (", kDefaultModelName, ", ", kDefaultModelFile,
        ") is not here: run tools/setup.sh to fetch it, or pass --model=PATH.gguf, a Hugging Face "
        "model directory or builtin:NAME"));
  }
  return path;
}

// The model's id in the OpenAI API: the flag, or a GGUF file's name without
// its extension, or --model as given.
std::string ServedName(const std::string& flag, const std::string& model, bool default_model) {
  if (!flag.empty()) return flag;
  if (default_model) return kDefaultModelName;
  if (absl::EndsWith(model, ".gguf")) {
    const size_t slash = model.rfind('/');
    const std::string base = slash == std::string::npos ? model : model.substr(slash + 1);
    return base.substr(0, base.size() - 5);
  }
  return model;
}

}  // namespace

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  if (o.model.empty()) {
    auto path = DefaultModel();
    if (!path.ok()) return path.status();
    o.model = *path;
    o.default_model = true;
  }
  o.served_model_name = ServedName(absl::GetFlag(FLAGS_served_model_name), o.model, o.default_model);
  o.mmproj = absl::GetFlag(FLAGS_mmproj);
  o.chat_template = absl::GetFlag(FLAGS_chat_template);
  o.tool_call_parser = absl::GetFlag(FLAGS_tool_call_parser);
  o.reasoning_parser = absl::GetFlag(FLAGS_reasoning_parser);
  if (absl::GetFlag(FLAGS_responses_store) < 0) return absl::InvalidArgumentError("--responses_store must be >= 0");
  o.responses_store = static_cast<size_t>(absl::GetFlag(FLAGS_responses_store));
  o.embeddings = absl::GetFlag(FLAGS_embeddings);
  o.pooling = absl::GetFlag(FLAGS_pooling);
  o.rerank = absl::GetFlag(FLAGS_rerank);
  o.listen = absl::GetFlag(FLAGS_listen);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.tp = absl::GetFlag(FLAGS_tp);
  if (o.tp < 1) return absl::InvalidArgumentError("--tp must be >= 1");
  auto backend = kernels::BackendOptionsFromFlags(  // --device, --dtype, --kv_dtype
      [&](absl::string_view device) { return AutoMatmulDtype(o.model, device); });
  if (!backend.ok()) return backend.status();
  o.backend = *backend;
  if (o.tp > 1 && o.backend.device.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=", o.backend.device, " with --tp > 1: each rank takes the device of its "
        "node-local rank; name the kind only (--device=",
        o.backend.device.substr(0, o.backend.device.find(':')), ")"));
  }
  auto policy = ParseSchedulerPolicy(absl::GetFlag(FLAGS_scheduler));
  if (!policy.ok()) return policy.status();
  o.engine.scheduler.policy = *policy;
  o.engine.scheduler.max_batch = absl::GetFlag(FLAGS_max_batch);
  o.engine.embeddings = o.embeddings;
  o.engine.scheduler.max_tokens_per_step = absl::GetFlag(FLAGS_max_tokens_per_step);
  if (!absl::GetFlag(FLAGS_kv_cache_memory).empty()) {
    auto bytes = ParseByteSize(absl::GetFlag(FLAGS_kv_cache_memory));
    if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat("--kv_cache_memory: ", bytes.status().message()));
    if (*bytes == 0) return absl::InvalidArgumentError("--kv_cache_memory must be above 0");
    o.engine.kv_cache.bytes = *bytes;
  }
  o.engine.kv_cache.device_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
  if (!(o.engine.kv_cache.device_memory_fraction > 0 && o.engine.kv_cache.device_memory_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu_memory_fraction must be in (0, 1], got ",
                                                   o.engine.kv_cache.device_memory_fraction));
  }
  o.engine.prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  o.engine.state_checkpoint_interval = absl::GetFlag(FLAGS_state_checkpoint_interval);
  if (o.engine.state_checkpoint_interval < 0 || o.engine.state_checkpoint_interval % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--state_checkpoint_interval must be a multiple of 32 (or 0), got ",
                                                   o.engine.state_checkpoint_interval));
  }
  o.engine.kv_cache.free_behind_window = absl::GetFlag(FLAGS_kv_free_behind_window);
  o.engine.scheduler.batch_delay = absl::Milliseconds(absl::GetFlag(FLAGS_batch_delay_ms));
  o.engine.max_seq_len = absl::GetFlag(FLAGS_max_seq_len);
  o.engine.max_queue = absl::GetFlag(FLAGS_max_queue);
  o.max_image_tokens = absl::GetFlag(FLAGS_max_image_tokens);
  if (o.max_image_tokens < 1 || o.max_image_tokens > 16384) {
    return absl::InvalidArgumentError(absl::StrCat("--max_image_tokens must be in [1, 16384], got ", o.max_image_tokens));
  }
  auto hosts = ParseImageHosts(absl::GetFlag(FLAGS_image_url_hosts));
  if (!hosts.ok()) return hosts.status();
  o.image_fetch.hosts = *std::move(hosts);
  o.engine.max_new_tokens_limit = absl::GetFlag(FLAGS_max_new_tokens_limit);
  auto speculative = ParseSpeculativeMode(absl::GetFlag(FLAGS_speculative));
  if (!speculative.ok()) return absl::InvalidArgumentError(absl::StrCat("--speculative: ", speculative.status().message()));
  o.engine.speculative.mode = *speculative;
  o.engine.speculative.max_tokens = absl::GetFlag(FLAGS_num_speculative_tokens);
  o.engine.speculative.max_step_rows = absl::GetFlag(FLAGS_speculative_max_rows);
  if (absl::Status st = ValidateSpeculativeOptions(o.engine.speculative); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", st.message()));
  }
  o.draft_model = absl::GetFlag(FLAGS_draft_model);
  if ((o.engine.speculative.mode == SpeculativeMode::kDraft) != !o.draft_model.empty()) {
    return absl::InvalidArgumentError("--speculative=draft and --draft_model go together");
  }
  o.draft_backend = o.backend;
  if (const std::string d = absl::GetFlag(FLAGS_draft_dtype); d == "auto") {
    o.draft_backend.matmul = AutoMatmulDtype(o.draft_model, o.backend.device);
  } else {
    auto matmul = kernels::ParseMatmulDtype(d);
    if (!matmul.ok()) return absl::InvalidArgumentError(absl::StrCat("--draft_dtype: ", matmul.status().message()));
    o.draft_backend.matmul = *matmul;
  }
  o.drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  o.api_key_file = absl::GetFlag(FLAGS_api_key_file);
  o.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_tls_client_ca)};
  if (o.tls.cert.empty() != o.tls.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!o.tls.client_ca.empty() && o.tls.cert.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
  }
  if (absl::Status st = CheckTlsFiles(o.tls); !st.ok()) return st;
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.http_listen = absl::GetFlag(FLAGS_http_listen);
  o.http_threads = absl::GetFlag(FLAGS_http_threads);
  // Checked before a model is loaded; binding happens once the engine runs.
  if (!o.metrics_listen.empty()) {
    if (auto hp = ParseHostPort("--metrics_listen", o.metrics_listen); !hp.ok()) return hp.status();
  }
  if (!o.http_listen.empty()) {
    if (auto hp = ParseHostPort("--http_listen", o.http_listen); !hp.ok()) return hp.status();
  }
  if (o.http_threads < 1) return absl::InvalidArgumentError("--http_threads must be >= 1");
  return o;
}

}  // namespace flover::server
