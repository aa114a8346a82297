// flover_server: the composition root. It reads like docs/architecture.md:
// options -> device -> model -> engine -> front ends -> signals.
//
// The first line on stdout is "listening on HOST:PORT". SIGTERM or SIGINT
// drains: health goes NOT_SERVING, new requests get UNAVAILABLE, in-flight
// ones finish within --drain_timeout_s, and the process exits 0. SIGHUP
// re-reads the API keys.
//
// With --tp=N under `mpirun -np N`, every rank loads its shard of the model;
// rank 0 runs the engine and the front ends, broadcasting each step; the
// other ranks run the same steps (RunEngineWorker). Any rank failing ends the
// whole job (exit 1).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <httplib.h>
#include <signal.h>

#include <cstdio>
#include <functional>
#include <thread>

#include "absl/flags/parse.h"
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "chat/tool_calls.h"
#include "dist/communicator.h"
#include "engine/engine.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_threads.h"
#include "model/model_loader.h"
#include "model/vision/image_processor.h"
#include "model/vision/qwen3_vl_vision.h"
#include "model/vision/vision_encoder.h"
#include "model/loader/gguf.h"
#include "model/pooling.h"
#include "server/api_keys.h"
#include "server/embeddings_api.h"
#include "server/rerank_api.h"
#include "server/flover_service.h"
#include "server/http_server.h"
#include "server/messages_api.h"
#include "server/responses_api.h"
#include "server/openai_api.h"
#include "server/request_convert.h"
#include "server/server_flags.h"
#include "server/server_options.h"
#include "server/tls.h"
#include "util/byte_size.h"
#include "util/status_macros.h"

namespace flover::server {
namespace {

// The device this rank computes on, and the collectives its shard reduces
// through: NCCL's on GPUs, else MPI's over host memory (or none for one rank).
struct Device {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Collectives> device_collectives;  // owned when the device has its own
  Collectives* collectives = nullptr;
  std::string name;  // --device as this rank resolved it ("cuda:1")
};

// This rank's model on its device, and what rank 0 serves it with.
struct Model {
  std::unique_ptr<CausalLm> model;
  std::shared_ptr<const Tokenizer> tokenizer;  // null: token ids only
  std::unique_ptr<ChatSupport> chat;           // rank 0 only
  ModelInfo info;
  std::string stored_dtype;
  // --speculative=mtp: the model's multi-token-prediction layer (rank 0,
  // one rank), sharing its embedding and head.
  std::unique_ptr<CausalLm> mtp;
  // A vision model's image side (rank 0): its tower on a CPU backend of its
  // own (EncoderAttention is not on the GPU yet), and its processor.
  std::unique_ptr<kernels::Backend> vision_backend;
  std::unique_ptr<ImageEncoder> vision;
  std::unique_ptr<ImageProcessor> image_processor;
};

// Rank 0's ways in: gRPC always, HTTP for OpenAI and metrics on request.
struct FrontEnds {
  std::unique_ptr<FloverService> service;
  std::unique_ptr<grpc::Server> grpc;
  std::string grpc_address;
  std::unique_ptr<HttpServer> metrics, openai;
  std::unique_ptr<ResponseStore> responses;  // /v1/responses' stored responses
  std::string embeddings;                    // with --embeddings: its pooling, for the log
};

// CPU threads per rank: all cores for one rank, else the node's cores shared
// by the ranks mpirun placed on it.
int DefaultThreads(const WorldConfig& world) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, world.local_size));
}

// The backend first: a missing GPU is reported before a model is loaded.
absl::StatusOr<Device> OpenDevice(kernels::BackendOptions options, Communicator* comm) {
  const WorldConfig world = comm != nullptr ? comm->world() : WorldConfig{};
  Device device;
  device.name = options.device = kernels::DeviceForRank(options.device, world);
  auto backend = kernels::CreateBackend(options);
  if (!backend.ok()) {
    if (world.tp_size == 1) return backend.status();
    return absl::Status(backend.status().code(),
                        absl::StrCat("--tp=", world.tp_size, ": rank ", world.rank, " (node-local rank ",
                                     world.local_rank, ") cannot open ", device.name, ": ",
                                     backend.status().message()));
  }
  device.backend = std::move(*backend);
  device.collectives = comm;
  if (world.tp_size > 1 && kernels::HasDeviceCollectives(device.name)) {
    // Activations are all-reduced on the devices; the step plan still
    // travels over MPI.
    FLOVER_ASSIGN_OR_RETURN(device.device_collectives,
                            kernels::CreateDeviceCollectives(*comm, *device.backend));
    device.collectives = device.device_collectives.get();
  }
  return device;
}

// Reads the checkpoint, uploads this rank's shard, and lets the checkpoint
// go; the tokenizer and (on rank 0) the chat template stay.
absl::StatusOr<Model> LoadShard(const ServerOptions& options, const WorldConfig& world, Device& device) {
  FLOVER_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadModel(options.model));
  // --max_seq_len past a LongRoPE model's original context: its long factors.
  if (options.engine.max_seq_len > 0) loaded->ServeContext(options.engine.max_seq_len);
  Model m;
  m.info = loaded->info();
  m.stored_dtype = loaded->stored_dtype();
  m.tokenizer = loaded->tokenizer();
  if (world.is_leader()) {
    FLOVER_ASSIGN_OR_RETURN(m.chat, MakeChatSupport(options.chat_template, loaded->chat_template(),
                                                    m.tokenizer, options.tool_call_parser,
                                                    options.reasoning_parser));
  }
  if (!options.mmproj.empty() && std::filesystem::is_directory(options.model)) {
    return absl::InvalidArgumentError("--mmproj goes with a GGUF --model; a directory brings its own vision tower");
  }
  if (world.is_leader() && (std::filesystem::is_directory(options.model) || !options.mmproj.empty())) {
    // The tower's products in bf16 where the model's are (--dtype=bf16: on
    // a CPU with AVX-512 BF16 about twice as fast) and this CPU runs them;
    // else f32.
    kernels::BackendOptions vision_options;
    if (options.backend.matmul == kernels::MatmulDtype::kBF16) vision_options.matmul = kernels::MatmulDtype::kBF16;
    auto vision_backend = kernels::CreateBackend(vision_options);
    if (!vision_backend.ok() && vision_options.matmul != kernels::MatmulDtype::kF32) {
      vision_backend = kernels::CreateBackend(kernels::BackendOptions{});
    }
    if (!vision_backend.ok()) return vision_backend.status();
    m.vision_backend = std::move(*vision_backend);
    absl::StatusOr<std::unique_ptr<ImageEncoder>> vision;
    absl::Status ready;  // the processor, and whether it fits the tower
    const std::string& source = options.mmproj.empty() ? options.model : options.mmproj;
    if (options.mmproj.empty()) {
      vision = LoadImageEncoder(options.model, *m.vision_backend);
      if (vision.ok()) {
        auto processor = LoadImageProcessor(options.model);
        if (processor.ok()) {
          m.image_processor = std::move(*processor);
        } else {
          ready = processor.status();
        }
      }
    } else {
      // llama.cpp's projector, by its type: Qwen3-VL's image token is the
      // model's <|image_pad|>, Gemma 3's <image_soft_token>, SmolVLM's <image>.
      std::string projector;
      {
        auto file = GgufFile::Open(options.mmproj);
        if (!file.ok()) return absl::InvalidArgumentError(absl::StrCat("--mmproj: ", file.status().message()));
        projector = file->GetString("clip.projector_type").value_or("");
      }
      const char* token = projector == "qwen3vl_merger" ? "<|image_pad|>"
                          : projector == "gemma3"       ? "<image_soft_token>"
                          : projector == "idefics3"     ? "<image>"
                                                        : nullptr;
      if (token == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("--mmproj: ", options.mmproj, ": clip.projector_type \"",
                                                       projector, "\" is not one Flover runs (qwen3vl_merger, gemma3, "
                                                       "idefics3)"));
      }
      auto ids = m.tokenizer == nullptr ? absl::StatusOr<std::vector<int32_t>>(absl::NotFoundError("no tokenizer"))
                                        : m.tokenizer->Encode(token, /*add_special_tokens=*/false);
      if (!ids.ok() || ids->size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(options.model, ": --mmproj (", projector, ") needs ", token,
                                                       " in the vocabulary"));
      }
      if (projector == "qwen3vl_merger") {
        auto tower = Qwen3VlVision::LoadGguf(options.mmproj, (*ids)[0], *m.vision_backend);
        if (!tower.ok()) return absl::InvalidArgumentError(absl::StrCat("--mmproj: ", tower.status().message()));
        vision = std::unique_ptr<ImageEncoder>(std::move(*tower));
      } else {
        auto tower = VisionEncoder::LoadGguf(options.mmproj, (*ids)[0], *m.vision_backend);
        if (!tower.ok()) return absl::InvalidArgumentError(absl::StrCat("--mmproj: ", tower.status().message()));
        vision = std::unique_ptr<ImageEncoder>(std::move(*tower));
      }
      FLOVER_ASSIGN_OR_RETURN(m.image_processor, LoadGgufImageProcessor(options.mmproj));
    }
    if (vision.ok() && ready.ok()) {
      m.image_processor->LimitRows(options.max_image_tokens);
      ready = m.image_processor->Matches(**vision);
      if (!ready.ok() && !options.mmproj.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": ", ready.message()));
      }
    }
    if (vision.ok() && ready.ok()) {
      m.vision = std::move(*vision);
    } else {
      // A directory whose image side Flover cannot run (a config it does
      // not take, tensors or processor settings missing: text-only saves
      // of image-text models) serves text, saying why images are off.
      if (vision.status().code() != absl::StatusCode::kNotFound || !ready.ok()) {
        std::fprintf(stderr, "flover_server: %s: images are off (text is served): %s\n", source.c_str(),
                     std::string(vision.ok() ? ready.message() : vision.status().message()).c_str());
      }
      vision = absl::NotFoundError("off");  // its buffers go before their backend
      m.image_processor.reset();
      m.vision_backend.reset();
    }
  }
  if (world.tp_size > 1) FLOVER_RETURN_IF_ERROR(loaded->CheckTensorParallel(world.tp_size));
  FLOVER_ASSIGN_OR_RETURN(m.model, loaded->Instantiate(*device.backend, device.collectives));
  if (options.engine.speculative.mode == SpeculativeMode::kMtp) {
    if (world.tp_size > 1) return absl::InvalidArgumentError("--speculative=mtp runs with one rank, not --tp=N");
    auto mtp = loaded->InstantiateMtp(*m.model);
    if (!mtp.ok()) {
      return absl::Status(mtp.status().code(), absl::StrCat("--speculative=mtp: ", mtp.status().message()));
    }
    m.mtp = std::move(*mtp);
  }
  return m;
}

// --speculative=draft's model, on rank 0 alone: its own backend (the
// device of rank 0, --draft_dtype) and the weights. Its tokenizer must be
// the model's, token for token, where both have one.
struct DraftModelHolder {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<CausalLm> model;
};
absl::StatusOr<DraftModelHolder> LoadDraftModel(const ServerOptions& options, const Device& device,
                                                const Model& target) {
  DraftModelHolder d;
  kernels::BackendOptions b = options.draft_backend;
  b.device = device.name;
  FLOVER_ASSIGN_OR_RETURN(d.backend, kernels::CreateBackend(b));
  auto loaded = LoadModel(options.draft_model);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("--draft_model: ", loaded.status().message()));
  }
  // The context the target serves (Serve has set max_seq_len by now).
  (*loaded)->ServeContext(options.engine.max_seq_len);
  const Tokenizer* mine = (*loaded)->tokenizer().get();
  const Tokenizer* theirs = target.tokenizer.get();
  if (mine != nullptr && theirs != nullptr) {
    if (mine->vocab_size() != theirs->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("--draft_model: its tokenizer has ", mine->vocab_size(),
                                                     " tokens, the model's ", theirs->vocab_size()));
    }
    for (int32_t id = 0; id < mine->vocab_size(); ++id) {
      if (mine->DecodeBytes({id}) != theirs->DecodeBytes({id}) || mine->IsSpecial(id) != theirs->IsSpecial(id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--draft_model: its token ", id, " is not the model's: another tokenizer"));
      }
    }
  }
  FLOVER_ASSIGN_OR_RETURN(d.model, (*loaded)->Instantiate(*d.backend, nullptr));
  return d;
}

// How embeddings pool: --pooling names it (L2-normalised), or the model's
// files do (sentence-transformers' modules.json and 1_Pooling in a
// directory, a GGUF file's <arch>.pooling_type), else the last token's row,
// normalised. A model whose files name a pooling is an embedding model.
struct PoolingChoice {
  Pooling pooling;
  std::string from;             // for the log
  bool named_by_model = false;  // the model's files name one
};

// `gguf`: the model's file, when it is one.
absl::StatusOr<PoolingChoice> ResolvePooling(const std::string& flag, const std::string& model,
                                             const GgufFile* gguf) {
  std::optional<Pooling> found;
  std::string from;
  if (gguf != nullptr) {
    FLOVER_ASSIGN_OR_RETURN(std::string arch, gguf->GetString("general.architecture"));
    FLOVER_ASSIGN_OR_RETURN(int64_t type, gguf->GetIntOr(arch + ".pooling_type", 0));
    found = PoolingFromGguf(type);
    from = arch + ".pooling_type";
  } else if (!absl::StartsWith(model, "builtin:")) {
    FLOVER_ASSIGN_OR_RETURN(found, ReadDirectoryPooling(model));
    from = "modules.json";
  }
  PoolingChoice choice;
  choice.named_by_model = found.has_value();
  if (flag != "auto") {
    auto kind = PoolingKindNamed(flag);
    if (!kind.ok()) return absl::InvalidArgumentError(absl::StrCat("--pooling: ", kind.status().message()));
    choice.pooling = {*kind, true};
    choice.from = "--pooling";
  } else if (found.has_value()) {
    choice.pooling = *found;
    choice.from = from;
  } else {
    choice.from = "the default: the model's files name none";
  }
  return choice;
}

absl::StatusOr<FrontEnds> StartFrontEnds(const ServerOptions& options, Engine& engine,
                                         const Model& model, const ModelDescription& description,
                                         const ApiKeys* keys, const PoolingChoice& pooling,
                                         std::optional<RerankFormat> rerank) {
  FrontEnds f;
  // Built once: the vocabulary as bytes, and the grammar compiler (its
  // cache), for constrained requests.
  ServingContext serving{engine, model.tokenizer.get(), model.chat.get()};
  if (model.vision != nullptr) {
    serving.image_processor = model.image_processor.get();
    serving.image_fetch = &options.image_fetch;
  }
  if (options.embeddings) {
    serving.pooling = pooling.pooling;
    f.embeddings = absl::StrCat(
        "embeddings: POST /v1/embeddings, ", PoolingKindName(pooling.pooling.kind), " pooling",
        pooling.pooling.normalize ? ", L2-normalised" : "", " (", pooling.from, ")",
        options.engine.embedding_only ? "; an embedding model: generation requests are refused" : "");
  }
  if (model.tokenizer != nullptr) {
    serving.token_bytes = std::make_shared<const TokenBytes>(
        *model.tokenizer, model.chat != nullptr ? ToolCallSpecialTexts(model.chat->tool_format)
                                                : std::vector<std::string>{});
    serving.grammars =
        std::make_shared<GrammarConstraints>(serving.token_bytes, model.info.eos_token_ids);
  }
  if (options.rerank && model.tokenizer == nullptr) {
    return absl::FailedPreconditionError("--rerank: the model has no tokenizer (rerank takes text)");
  }
  if (options.rerank && !rerank.has_value()) {
    FLOVER_ASSIGN_OR_RETURN(rerank, Qwen3RerankFormat(*model.tokenizer));
  }
  f.service = std::make_unique<FloverService>(serving, description, keys);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  FLOVER_ASSIGN_OR_RETURN(auto credentials, GrpcServerCredentials(options.tls));
  builder.AddListeningPort(options.listen, credentials, &port);
  builder.RegisterService(f.service.get());
  f.grpc = builder.BuildAndStart();
  if (f.grpc == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  f.grpc_address = absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":", port);
  // The HTTP ports, each when its flag is given; a failure stops gRPC too.
  auto start_http = [&](const char* flag, const std::string& address, int threads,
                        std::function<void(httplib::Server&)> routes,
                        std::unique_ptr<HttpServer>* out) -> absl::Status {
    if (address.empty()) return absl::OkStatus();
    FLOVER_ASSIGN_OR_RETURN(*out, HttpServer::Start(flag, address, threads, routes, options.tls));
    return absl::OkStatus();
  };
  absl::Status st = start_http(
      "--metrics_listen", options.metrics_listen, /*threads=*/2,
      [&engine, description](httplib::Server& http) {
        AddMetricsRoute(http, [&engine, description] { return RenderMetrics(engine, description); });
      },
      &f.metrics);
  f.responses = std::make_unique<ResponseStore>(options.responses_store);
  if (st.ok()) {
    st = start_http(
        "--http_listen", options.http_listen, options.http_threads,
        [serving, &options, keys, rerank, responses = f.responses.get()](httplib::Server& http) {
          AddOpenAiRoutes(http, serving, options.served_model_name, keys);
          AddMessagesRoutes(http, serving, options.served_model_name, keys);
          AddResponsesRoutes(http, serving, options.served_model_name, *responses, keys);
          if (options.embeddings) AddEmbeddingsRoutes(http, serving, options.served_model_name, keys);
          if (rerank.has_value()) AddRerankRoutes(http, serving, options.served_model_name, *rerank, keys);
        },
        &f.openai);
  }
  if (!st.ok()) {
    f.grpc->Shutdown(std::chrono::system_clock::now());
    return st;
  }
  return f;
}

// What the server runs, where, for the log (stdout; the first line is the
// gRPC address tests and scripts wait for).
void PrintStartup(const ServerOptions& options, const FrontEnds& f, const Engine& engine,
                  const Model& model, const kernels::DeviceInfo& device, const std::string& device_name,
                  int tp, absl::Duration create_time) {
  std::printf("listening on %s\n", f.grpc_address.c_str());
  if (f.metrics != nullptr) std::printf("metrics on %s/metrics\n", f.metrics->url().c_str());
  if (f.openai != nullptr) std::printf("openai api on %s/v1\n", f.openai->url().c_str());
  if (!f.embeddings.empty()) std::printf("%s\n", f.embeddings.c_str());
  if (options.rerank) std::printf("rerank: POST /v1/rerank and /rerank (Qwen3-Reranker's prompt, yes / no)\n");
  const ModelInfo& c = model.info;
  const std::string experts =
      c.experts > 0 ? absl::StrCat(", ", c.experts, " experts (", c.experts_per_token, " per token)") : "";
  std::printf("model %s: %s, %d layers, %d heads (%d KV), %d wide%s, vocab %d, %d positions, %s "
              "weights (linear layers in %s), %s\n",
              options.default_model ? absl::StrCat(kDefaultModelName, " (the default)").c_str()
                                    : options.model.c_str(),
              c.architecture.c_str(), c.n_layer, c.n_head, c.n_kv_head, c.hidden, experts.c_str(), c.vocab_size,
              c.max_positions, model.stored_dtype.c_str(),
              kernels::MatmulDtypeName(options.backend.matmul),
              model.tokenizer ? "tokenizer" : "no tokenizer (token ids only)");
  if (options.backend.matmul == kernels::MatmulDtype::kNative) {
    if (const std::string widened = WidenedMatrices(options.model); !widened.empty()) {
      std::printf("native: %s have no block kernel and are held in f32; --dtype=int8 or bf16 hold "
                  "them in 8 or 16 bits\n",
                  widened.c_str());
    }
  }
  if (model.chat->format != nullptr) {
    const std::vector<int32_t>& end = model.chat->format->end_of_turn_ids();
    std::printf("chat template: %s; a turn ends at %s; served as \"%s\"\n",
                options.default_model ? "the model's" : model.chat->format->source().c_str(),
                end.empty() ? "the model's EOS" : model.tokenizer->Decode(end).c_str(),
                options.served_model_name.c_str());
  } else {
    std::printf("chat template: none usable (messages are refused: %s); served as \"%s\"\n",
                std::string(model.chat->unavailable.message()).c_str(),
                options.served_model_name.c_str());
  }
  if (device.total_bytes > 0) {
    std::printf("device %s: %s, %.1f GiB (%.1f GiB free after loading)\n", device_name.c_str(),
                device.name.c_str(), device.total_bytes / 1073741824.0, device.free_bytes / 1073741824.0);
  } else {
    std::printf("device %s: %s\n", device_name.c_str(), device.name.c_str());
  }
  const EngineStats stats = engine.Stats();
  const EngineOptions& e = options.engine;
  std::printf("KV cache: %s per rank = %lld tokens (blocks of %d), %s, %s per token; up to %d sequences of up to "
              "%d positions; prefix caching %s; tp %d; scheduler %s, %d CPU threads per rank\n",
              FormatByteSize(stats.kv_bytes_total).c_str(),
              static_cast<long long>(stats.kv_tokens_total), KvCacheShape::kBlockSize,
              kernels::KvFormatName(options.backend.kv).c_str(), FormatByteSize(stats.kv_bytes_per_token).c_str(),
              e.scheduler.max_batch, e.max_seq_len,
              e.prefix_caching ? "on" : "off", tp,
              std::string(SchedulerPolicyName(e.scheduler.policy)).c_str(), kernels::CpuThreads());
  const SchedulerOptions& running = engine.options().scheduler;  // what the engine made of them
  if (running.window > 0) {
    std::printf("sliding window of %d positions on every layer: blocks behind it are given back\n", running.window);
  }
  if (stats.state_slots > 0) {
    std::printf("recurrent state: %lld slots of %s (%s of the KV cache), one per running sequence%s; prefix "
                "checkpoints %s\n",
                static_cast<long long>(stats.state_slots), FormatByteSize(stats.state_slot_bytes).c_str(),
                FormatByteSize(stats.state_slots * stats.state_slot_bytes).c_str(),
                e.speculative.mode == SpeculativeMode::kOff ? "" : " (two while it verifies drafts)",
                e.prefix_caching ? absl::StrCat("every ", e.state_checkpoint_interval,
                                                " positions and at each prompt's last block, in the slots left over")
                                       .c_str()
                                 : "off");
  }
  if (running.local_window > 0) {
    std::printf("local layers (window %d) keep blocks of their own, given back behind the window\n",
                running.local_window);
  }
  std::printf("kernels compiled for steps of up to %d rows in %.0f ms\n",
              MaxRowsPerStep(e.scheduler, e.max_seq_len), absl::ToDoubleMilliseconds(create_time));
  if (e.speculative.mode == SpeculativeMode::kOff) {
    std::printf("speculative decoding off\n");
  } else {
    const bool mtp = e.speculative.mode == SpeculativeMode::kMtp;
    std::printf("speculative decoding %s%s%s (%s): up to %d draft tokens per sequence, in steps of up to %d rows\n",
                std::string(SpeculativeModeName(e.speculative.mode)).c_str(),
                options.draft_model.empty() ? "" : " by ", options.draft_model.c_str(),
                mtp                           ? "the model's multi-token-prediction layer"
                : options.draft_model.empty() ? "n-grams"
                                              : kernels::MatmulDtypeName(options.draft_backend.matmul),
                e.speculative.max_tokens, e.speculative.max_step_rows);
  }
  std::fflush(stdout);
}

// Waits for SIGTERM/SIGINT, or for the engine to fail for good; SIGHUP
// re-reads the API keys.
absl::Status WaitForStop(const sigset_t& signals, const Engine& engine, ApiKeys* keys) {
  while (true) {
    timespec tick{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGHUP) {
      if (keys != nullptr) {
        const absl::Status st = keys->Reload();
        if (st.ok()) {
          std::fprintf(stderr, "flover_server: SIGHUP: %zu API keys loaded\n", keys->size());
        } else {
          std::fprintf(stderr, "flover_server: SIGHUP: kept the old API keys: %s\n",
                       std::string(st.message()).c_str());
        }
      }
      continue;
    }
    if (sig > 0) {
      std::fprintf(stderr, "flover_server: signal %d, draining\n", sig);
      return absl::OkStatus();
    }
    FLOVER_RETURN_IF_ERROR(engine.FatalError());
  }
}

// Health goes NOT_SERVING; the engine refuses new requests and finishes the
// running ones (up to the drain timeout); then the front ends close. A stop
// caused by a failed engine ends at once: nothing can be served.
absl::Status Drain(absl::Status stop, const ServerOptions& options, Engine& engine, FrontEnds& f) {
  f.grpc->GetHealthCheckService()->SetServingStatus(false);
  if (!stop.ok()) {
    f.grpc->Shutdown(std::chrono::system_clock::now());
    return stop;
  }
  engine.Shutdown(options.drain_timeout);
  f.grpc->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  f.grpc->Wait();
  std::fprintf(stderr, "flover_server: stopped\n");
  return absl::OkStatus();
}

absl::Status Serve(ServerOptions options, const sigset_t& signals, Communicator* comm) {
  const WorldConfig world = comm != nullptr ? comm->world() : WorldConfig{};
  // The API keys before the model, so a bad file fails fast.
  std::unique_ptr<ApiKeys> keys;
  if (world.is_leader() && !options.api_key_file.empty()) {
    FLOVER_ASSIGN_OR_RETURN(keys, ApiKeys::Load(options.api_key_file));
  }
  kernels::SetCpuThreads(options.threads > 0 ? options.threads : DefaultThreads(world));
  FLOVER_ASSIGN_OR_RETURN(Device device, OpenDevice(options.backend, comm));
  FLOVER_ASSIGN_OR_RETURN(Model model, LoadShard(options, world, device));
  if (options.engine.max_seq_len == 0) options.engine.max_seq_len = model.info.max_positions;
  if (!world.is_leader()) return RunEngineWorker(*model.model, options.engine, *comm);

  DraftModelHolder draft;
  if (!options.draft_model.empty()) {
    FLOVER_ASSIGN_OR_RETURN(draft, LoadDraftModel(options, device, model));
    options.engine.draft_model = draft.model.get();
  }
  options.engine.mtp_model = model.mtp.get();
  options.engine.vision = model.vision.get();
  // An embedding model (its files name a pooling) serves embeddings, and
  // nothing else; a generative one with --embeddings, both.
  // (A GGUF file's metadata, read once more for what the loader does not keep.)
  std::optional<GgufFile> gguf;
  if (absl::EndsWith(options.model, ".gguf")) {
    FLOVER_ASSIGN_OR_RETURN(gguf, GgufFile::Open(options.model));
  }
  FLOVER_ASSIGN_OR_RETURN(PoolingChoice pooling,
                          ResolvePooling(options.pooling, options.model, gguf ? &*gguf : nullptr));
  if (pooling.named_by_model) {
    options.embeddings = true;
    options.engine.embedding_only = true;
  }
  options.engine.embeddings = options.embeddings;
  std::optional<RerankFormat> rerank_format;
  // llama.cpp's reranker files keep the answer's two rows apart (cls.output)
  // and drop an untied lm_head: a reranker, read through its hidden rows.
  if (gguf.has_value()) {
    FLOVER_ASSIGN_OR_RETURN(rerank_format, GgufRerankFormat(*gguf, model.info.hidden));
    if (rerank_format.has_value()) {
      options.rerank = true;
      options.engine.embeddings = options.engine.embedding_only = true;
    }
  }
  const absl::Time create_start = absl::Now();
  FLOVER_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::Create(*model.model, model.tokenizer.get(), options.engine, comm));
  const absl::Duration create_time = absl::Now() - create_start;

  const kernels::DeviceInfo device_info = device.backend->Device();
  ModelDescription description{options.model, model.stored_dtype,
                               kernels::MatmulDtypeName(options.backend.matmul),
                               kernels::KvFormatName(options.backend.kv), world.tp_size};
  description.served_name = options.served_model_name;
  description.device = device.name;
  description.device_name = device_info.name;
  description.device_memory_bytes = device_info.total_bytes;
  FLOVER_ASSIGN_OR_RETURN(FrontEnds front, StartFrontEnds(options, *engine, model, description, keys.get(), pooling,
                                                                rerank_format));
  PrintStartup(options, front, *engine, model, device_info, device.name, world.tp_size, create_time);
  return Drain(WaitForStop(signals, *engine, keys.get()), options, *engine, front);
}

}  // namespace
}  // namespace flover::server

int main(int argc, char** argv) {
  // Block the stop signals in every thread (gRPC's, the engine's and MPI's
  // inherit this mask); rank 0's main thread takes them with sigtimedwait.
  // Other ranks never take them: they stop when rank 0 tells them to.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::ParseCommandLine(argc, argv);
  auto options = flover::server::ServerOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "flover_server: %s\n", std::string(options.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<flover::Communicator> comm;
  if (options->tp > 1) {
    auto c = flover::CreateMpiCommunicator(options->tp);
    if (!c.ok()) {
      std::fprintf(stderr, "flover_server: %s\n", std::string(c.status().message()).c_str());
      flover::FinalizeMpi();
      return 1;
    }
    comm = std::move(*c);
  }
  const absl::Status st = flover::server::Serve(*options, signals, comm.get());
  if (!st.ok()) {
    const int rank = comm ? comm->world().rank : 0;
    std::fprintf(stderr, "flover_server: rank %d: %s\n", rank, std::string(st.message()).c_str());
    // No rank may be left waiting in a collective: end the whole job.
    if (comm) comm->Abort(1);
    return 1;
  }
  if (comm) flover::FinalizeMpi();
  return 0;
}
