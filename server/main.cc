// flover_server: loads a model, starts the engine and serves the Flover gRPC
// API (plus grpc.health.v1 and reflection). The first line on stdout is
// "listening on HOST:PORT". SIGTERM or SIGINT drains: health goes
// NOT_SERVING, new requests get UNAVAILABLE, in-flight ones finish within
// --drain_timeout_s, and the process exits 0.
//
// With --tp=N under `mpirun -np N`, every rank loads its shard of the model;
// rank 0 serves gRPC and runs the engine, broadcasting each step; the other
// ranks run the same steps. Any rank failing ends the whole job (exit 1).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <signal.h>

#include <algorithm>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dist/communicator.h"
#include "engine/engine.h"
#include "model/model_loader.h"
#include "engine/step_executor.h"
#include "engine/tp_worker.h"
#include "kernels/backend_factory.h"
#include "kernels/backend_flags.h"
#include "kernels/cpu/cpu_threads.h"
#include "server/flover_service.h"
#include <httplib.h>

#include "server/api_keys.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/request_convert.h"
#include "server/server_options.h"
#include "util/byte_size.h"
#include "util/file_util.h"
#include "util/runfiles.h"

ABSL_FLAG(std::string, model, "",
          "A GGUF file, a Hugging Face model directory, or builtin:NAME; empty: SmolLM2-135M-Instruct "
          "(models/, fetched by tools/setup.sh)");
ABSL_FLAG(std::string, served_model_name, "",
          "The model's id in the OpenAI API (what clients send as `model`; /v1/models lists it); "
          "empty: the GGUF file's name, else --model");
ABSL_FLAG(std::string, chat_template, "",
          "A Jinja chat template file to use instead of the model's own");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "Address to serve on; port 0 picks a free port");
ABSL_FLAG(int, threads, 0,
          "CPU threads for the model per rank (0 = the cores divided by the ranks on this node)");
ABSL_FLAG(int, tp, 1, "Tensor-parallel ranks; > 1 needs mpirun -np TP (rank 0 serves gRPC)");
ABSL_FLAG(int, max_batch, 128, "Most sequences running at once (the KV cache's memory decides how many fit)");
ABSL_FLAG(int, max_seq_len, 0,
          "Most positions one sequence may reach, prompt + output (0 = the model's context); "
          "nothing is reserved for it");
ABSL_FLAG(std::string, kv_cache_memory, "",
          "The KV cache's memory per rank, e.g. 4GiB or 512MiB (empty: on a GPU "
          "--gpu_memory_fraction of what is free after the weights; on the CPU 4 GiB; either "
          "at most what --max_batch sequences of --max_seq_len positions fill)");
ABSL_FLAG(double, gpu_memory_fraction, 0.9,
          "Without --kv_cache_memory on a GPU: the share of its free memory (after weights and "
          "work space) the KV cache takes");
ABSL_FLAG(bool, prefix_caching, true,
          "Reuse the computed K/V of prompts' leading tokens (shared system prompts, earlier "
          "turns of a chat); finished sequences' blocks stay cached until memory is needed");
ABSL_FLAG(int, max_tokens_per_step, 256, "Token budget of one fused forward (prompts are chunked)");
ABSL_FLAG(std::string, scheduler, "fusion", "fusion, dynamic, static or sequential");
ABSL_FLAG(int, batch_delay_ms, 10, "dynamic scheduler: how long to gather a batch");
ABSL_FLAG(int, max_queue, 1024, "Waiting requests; more are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_new_tokens_limit, 4096, "Largest max_new_tokens a request may ask for");
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

// Whether the TLS files load and the key matches the certificate, before
// anything else starts (gRPC's own error would only say it cannot listen).
absl::Status CheckTlsFiles(const TlsFiles& tls) {
  if (!tls.enabled()) return absl::OkStatus();
  // Each file alone first, so the error names the one that is wrong.
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
  if (FILE* f = std::fopen(tls.cert.c_str(), "r")) {
    cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
  }
  if (FILE* f = std::fopen(tls.key.c_str(), "r")) {
    key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
    std::fclose(f);
  }
  std::string error;
  if (cert == nullptr) {
    error = absl::StrCat("--tls_cert: ", tls.cert, " is not a readable PEM certificate");
  } else if (key == nullptr) {
    error = absl::StrCat("--tls_key: ", tls.key, " is not a readable PEM private key");
  } else if (X509_check_private_key(cert, key) != 1) {
    error = absl::StrCat("--tls_key: ", tls.key, " is not the key of --tls_cert ", tls.cert,
                         " (not a matching PEM certificate and key)");
  } else if (!tls.client_ca.empty()) {
    X509* ca = nullptr;
    if (FILE* f = std::fopen(tls.client_ca.c_str(), "r")) {
      ca = PEM_read_X509(f, nullptr, nullptr, nullptr);
      std::fclose(f);
    }
    if (ca == nullptr) error = absl::StrCat("--tls_client_ca: ", tls.client_ca, " is not a readable PEM CA");
    X509_free(ca);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return error.empty() ? absl::OkStatus() : absl::InvalidArgumentError(error);
}

// Where tools/setup.sh puts the default model: models/ in the clone, which
// a binary built there finds in its Bazel runfiles (or, run from the
// clone's root, under the current directory).
constexpr char kDefaultModelFile[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr char kDefaultModelName[] = "SmolLM2-135M-Instruct";  // its served name

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

// How `messages` are served: the model's chat template (or --chat_template's),
// or why not. A --chat_template that does not parse stops the server; a
// model's own that does not is reported and chat is refused with the reason.
absl::StatusOr<std::unique_ptr<ChatSupport>> MakeChatSupport(const std::string& flag,
                                                             ChatTemplateInfo info,
                                                             std::shared_ptr<const Tokenizer> tokenizer) {
  auto chat = std::make_unique<ChatSupport>();
  if (!flag.empty()) {
    auto text = ReadFlagFile("--chat_template", flag);
    if (!text.ok()) return text.status();
    info.text = std::move(*text);
    info.source = flag;
  }
  if (info.text.empty()) return chat;  // refused: no template
  if (tokenizer == nullptr) {
    chat->unavailable = absl::FailedPreconditionError(
        "messages: the model has no tokenizer, so its chat template cannot be used");
    return chat;
  }
  auto format = ChatFormat::Create(info.text, info.source, info.bos_token, info.eos_token, tokenizer);
  if (!format.ok()) {
    if (!flag.empty()) return absl::InvalidArgumentError(absl::StrCat("--chat_template: ", format.status().message()));
    chat->unavailable = absl::FailedPreconditionError(absl::StrCat(
        "messages: the model's chat template is not usable here (", format.status().message(),
        "); start the server with --chat_template=FILE"));
    return chat;
  }
  chat->format = std::move(*format);
  return chat;
}

absl::StatusOr<ServerOptions> OptionsFromFlags() {
  ServerOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  if (o.model.empty()) {
    auto path = DefaultModel();
    if (!path.ok()) return path.status();
    o.model = *path;
    o.default_model = true;
  }
  o.served_model_name = ServedName(absl::GetFlag(FLAGS_served_model_name), o.model, o.default_model);
  o.chat_template = absl::GetFlag(FLAGS_chat_template);
  o.listen = absl::GetFlag(FLAGS_listen);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.tp = absl::GetFlag(FLAGS_tp);
  if (o.tp < 1) return absl::InvalidArgumentError("--tp must be >= 1");
  auto backend = kernels::BackendOptionsFromFlags();  // --device, --dtype, --kv_dtype
  if (!backend.ok()) return backend.status();
  o.backend = *backend;
  if (o.tp > 1 && o.backend.device != "cpu" && o.backend.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=", o.backend.device, " with --tp > 1: each rank takes the GPU of its "
        "node-local rank; use --device=cuda"));
  }
  auto policy = ParseSchedulerPolicy(absl::GetFlag(FLAGS_scheduler));
  if (!policy.ok()) return policy.status();
  o.engine.scheduler.policy = *policy;
  o.engine.scheduler.max_batch = absl::GetFlag(FLAGS_max_batch);
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
  o.engine.scheduler.batch_delay = absl::Milliseconds(absl::GetFlag(FLAGS_batch_delay_ms));
  o.engine.max_seq_len = absl::GetFlag(FLAGS_max_seq_len);
  o.engine.max_queue = absl::GetFlag(FLAGS_max_queue);
  o.engine.max_new_tokens_limit = absl::GetFlag(FLAGS_max_new_tokens_limit);
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

// Plaintext, or TLS from the PEM files (requiring client certificates when
// a client CA is given). Errors name the flag and the file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  auto cert = ReadFlagFile("--tls_cert", tls.cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadFlagFile("--tls_key", tls.key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      tls.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!tls.client_ca.empty()) {
    auto ca = ReadFlagFile("--tls_client_ca", tls.client_ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

// OpenMP threads per rank: all cores for one rank, else the cores shared by
// the ranks mpirun placed on this node.
int DefaultThreads(int tp) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = tp > 1 && local != nullptr ? std::max(1, std::atoi(local)) : 1;
  return std::max(1, cores / ranks_here);
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
    if (absl::Status st = engine.FatalError(); !st.ok()) return st;
  }
}

absl::Status Serve(ServerOptions options, const sigset_t& signals, Communicator* comm) {
  const int tp = comm ? comm->world().tp_size : 1;
  const bool leader = comm == nullptr || comm->world().is_leader();
  std::unique_ptr<ApiKeys> keys;  // read before the model, so a bad file fails fast
  if (leader && !options.api_key_file.empty()) {
    auto loaded_keys = ApiKeys::Load(options.api_key_file);
    if (!loaded_keys.ok()) return loaded_keys.status();
    keys = std::move(*loaded_keys);
  }
  kernels::SetCpuThreads(options.threads > 0 ? options.threads : DefaultThreads(tp));
  // With tensor parallelism on GPUs, rank r of a node takes its GPU r.
  const bool gpu_tp = tp > 1 && options.backend.device == "cuda";
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (gpu_tp) options.backend.device = absl::StrCat("cuda:", local_rank ? local_rank : "0");
  // The device first: a missing GPU is reported before a model is loaded.
  auto backend = kernels::CreateBackend(options.backend);
  if (!backend.ok()) {
    if (gpu_tp) {
      return absl::Status(backend.status().code(),
                          absl::StrCat("--tp=", tp, " on GPUs: this rank (node-local rank ",
                                       local_rank ? local_rank : "0",
                                       ") has no GPU of its own: ", backend.status().message()));
    }
    return backend.status();
  }
  // Activations are all-reduced on the GPUs (NCCL); the step plan still
  // travels over MPI.
  std::unique_ptr<Collectives> device_collectives;
  if (gpu_tp) {
    auto c = kernels::CreateDeviceCollectives(*comm, **backend);
    if (!c.ok()) return c.status();
    device_collectives = std::move(*c);
  }
  Collectives* collectives = device_collectives ? device_collectives.get()
                                                : static_cast<Collectives*>(comm);
  auto loaded = LoadModel(options.model);
  if (!loaded.ok()) return loaded.status();
  const ModelInfo config = (*loaded)->info();
  const std::string stored_dtype = (*loaded)->stored_dtype();
  // The tokenizer outlives the loaded checkpoint, which goes once this
  // rank's weights are on the backend.
  const std::shared_ptr<const Tokenizer> tokenizer = (*loaded)->tokenizer();
  std::unique_ptr<ChatSupport> chat;
  if (leader) {
    auto made = MakeChatSupport(options.chat_template, (*loaded)->chat_template(), tokenizer);
    if (!made.ok()) return made.status();
    chat = std::move(*made);
  }
  if (options.engine.max_seq_len == 0) options.engine.max_seq_len = config.max_positions;
  if (tp > 1) {
    if (absl::Status st = (*loaded)->CheckTensorParallel(tp); !st.ok()) return st;
  }
  auto model = (*loaded)->Instantiate(**backend, collectives);  // this rank's shard with tp > 1
  if (!model.ok()) return model.status();
  loaded->reset();

  if (!leader) {
    // The same set-up as Engine::Create on rank 0: kernels compiled for
    // every step size, and the KV cache.
    const SchedulerOptions& s = options.engine.scheduler;
    auto executor = StepExecutor::Create(**model, options.engine.kv_cache, s.max_batch,
                                         options.engine.max_seq_len,
                                         MaxRowsPerStep(s, options.engine.max_seq_len), comm);
    if (!executor.ok()) return executor.status();
    return RunTensorParallelWorker(**executor, *comm);
  }

  const absl::Time create_start = absl::Now();
  auto engine = Engine::Create(**model, tokenizer.get(), options.engine, comm);  // compiles kernels
  if (!engine.ok()) return engine.status();
  const absl::Duration create_time = absl::Now() - create_start;

  const kernels::DeviceInfo device = (*backend)->Device();
  ModelDescription description{options.model, stored_dtype,
                               kernels::MatmulDtypeName(options.backend.matmul),
                               kernels::KvDtypeName(options.backend.kv), tp};
  description.served_name = options.served_model_name;
  description.device = options.backend.device;
  description.device_name = device.name;
  description.device_memory_bytes = device.total_bytes;
  FloverService service(**engine, tokenizer.get(), chat.get(), description, keys.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  auto credentials = ServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(options.listen, *credentials, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  // The HTTP front ends, each on its own port when its flag is given.
  auto start_http = [&](const char* flag, const std::string& address, int threads,
                        std::function<void(httplib::Server&)> routes,
                        std::unique_ptr<HttpServer>* out) -> absl::Status {
    if (address.empty()) return absl::OkStatus();
    auto started = HttpServer::Start(flag, address, threads, routes, options.tls);
    if (!started.ok()) return started.status();
    *out = std::move(*started);
    return absl::OkStatus();
  };
  std::unique_ptr<HttpServer> metrics, http_api;
  absl::Status http_started = start_http(
      "--metrics_listen", options.metrics_listen, /*threads=*/2,
      [&engine = **engine, &description](httplib::Server& http) {
        AddMetricsRoute(http, [&] { return RenderMetrics(engine, description); });
      },
      &metrics);
  if (http_started.ok()) {
    http_started = start_http(
        "--http_listen", options.http_listen, options.http_threads,
        [&engine = **engine, &tokenizer, &chat, &options, &keys](httplib::Server& http) {
          AddOpenAiRoutes(http, engine, tokenizer.get(), chat.get(), options.served_model_name,
                          keys.get());
        },
        &http_api);
  }
  if (!http_started.ok()) {
    server->Shutdown(std::chrono::system_clock::now());
    return http_started;
  }
  std::printf("listening on %s:%d\n", host.c_str(), port);
  if (metrics != nullptr) std::printf("metrics on %s/metrics\n", metrics->url().c_str());
  if (http_api != nullptr) std::printf("openai api on %s/v1\n", http_api->url().c_str());
  const EngineStats stats = (*engine)->Stats();
  std::printf("model %s: %s, %d layers, %d heads (%d KV), %d wide, vocab %d, %d positions, %s "
              "weights (linear layers in %s), %s\n",
              options.default_model ? absl::StrCat(kDefaultModelName, " (the default)").c_str()
                                    : options.model.c_str(),
              config.architecture.c_str(), config.n_layer, config.n_head,
              config.n_kv_head, config.hidden, config.vocab_size, config.max_positions,
              stored_dtype.c_str(),
              kernels::MatmulDtypeName(options.backend.matmul),
              tokenizer ? "tokenizer" : "no tokenizer (token ids only)");
  if (chat->format != nullptr) {
    const std::vector<int32_t>& end = chat->format->end_of_turn_ids();
    std::printf("chat template: %s; a turn ends at %s; served as \"%s\"\n",
                options.default_model ? "the model's" : chat->format->source().c_str(),
                end.empty() ? "the model's EOS" : tokenizer->Decode(end).c_str(),
                options.served_model_name.c_str());
  } else {
    std::printf("chat template: none usable (messages are refused: %s); served as \"%s\"\n",
                std::string(chat->unavailable.message()).c_str(), options.served_model_name.c_str());
  }
  if (device.total_bytes > 0) {
    std::printf("device %s: %s, %.1f GiB (%.1f GiB free after loading)\n",
                options.backend.device.c_str(), device.name.c_str(), device.total_bytes / 1073741824.0,
                device.free_bytes / 1073741824.0);
  } else {
    std::printf("device %s: %s\n", options.backend.device.c_str(), device.name.c_str());
  }
  std::printf("KV cache: %s per rank = %lld tokens (blocks of %d), %s; up to %d sequences of up to "
              "%d positions; prefix caching %s; tp %d; scheduler %s, %d CPU threads per rank\n",
              FormatByteSize(stats.kv_bytes_total).c_str(),
              static_cast<long long>(stats.kv_tokens_total), KvCacheShape::kBlockSize,
              kernels::KvDtypeName(options.backend.kv), options.engine.scheduler.max_batch,
              options.engine.max_seq_len, options.engine.prefix_caching ? "on" : "off", tp,
              std::string(SchedulerPolicyName(options.engine.scheduler.policy)).c_str(),
              kernels::CpuThreads());
  std::printf("kernels compiled for steps of up to %d rows in %.0f ms\n",
              MaxRowsPerStep(options.engine.scheduler, options.engine.max_seq_len),
              absl::ToDoubleMilliseconds(create_time));
  std::fflush(stdout);

  const absl::Status stop = WaitForStop(signals, **engine, keys.get());
  server->GetHealthCheckService()->SetServingStatus(false);
  if (!stop.ok()) {
    // The ranks are out of step: nothing can be served; end now.
    server->Shutdown(std::chrono::system_clock::now());
    return stop;
  }
  (*engine)->Shutdown(options.drain_timeout);  // refuses new requests, finishes in-flight ones
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  std::fprintf(stderr, "flover_server: stopped\n");
  return absl::OkStatus();
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
  auto options = flover::server::OptionsFromFlags();
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
