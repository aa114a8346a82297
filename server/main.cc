// flover_server: loads a model, starts the engine and serves the Flover gRPC
// API (plus grpc.health.v1 and reflection). The first line on stdout is
// "listening on HOST:PORT". SIGTERM or SIGINT drains: health goes
// NOT_SERVING, new requests get UNAVAILABLE, in-flight ones finish within
// --drain_timeout_s, and the process exits 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/model_loader.h"
#include "kernels/cpu/cpu_ops.h"
#include "server/flover_service.h"
#include "server/server_options.h"

ABSL_FLAG(std::string, model, "builtin:gpt2-small", "Model directory or builtin:NAME");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "Address to serve on; port 0 picks a free port");
ABSL_FLAG(int, threads, 0, "CPU threads for the model (0 = all cores)");
ABSL_FLAG(int, max_batch, 32, "KV cache slots: sequences in flight at once");
ABSL_FLAG(int, max_seq_len, 0, "Positions per slot, prompt + output (0 = the model's maximum)");
ABSL_FLAG(int, max_tokens_per_step, 256, "Token budget of one fused forward (prompts are chunked)");
ABSL_FLAG(std::string, scheduler, "fusion", "fusion, dynamic, static or sequential");
ABSL_FLAG(bool, kv_shuffle, true, "Compact the KV cache when sequences finish");
ABSL_FLAG(int, batch_delay_ms, 10, "dynamic scheduler: how long to gather a batch");
ABSL_FLAG(int, max_queue, 1024, "Waiting requests; more are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_new_tokens_limit, 4096, "Largest max_new_tokens a request may ask for");
ABSL_FLAG(double, drain_timeout_s, 30, "On SIGTERM/SIGINT, how long in-flight requests may run");

namespace flover::server {
namespace {

absl::StatusOr<ServerOptions> OptionsFromFlags() {
  ServerOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.listen = absl::GetFlag(FLAGS_listen);
  o.threads = absl::GetFlag(FLAGS_threads);
  auto policy = ParseSchedulerPolicy(absl::GetFlag(FLAGS_scheduler));
  if (!policy.ok()) return policy.status();
  o.engine.scheduler.policy = *policy;
  o.engine.scheduler.max_batch = absl::GetFlag(FLAGS_max_batch);
  o.engine.scheduler.max_tokens_per_step = absl::GetFlag(FLAGS_max_tokens_per_step);
  o.engine.scheduler.kv_shuffle = absl::GetFlag(FLAGS_kv_shuffle);
  o.engine.scheduler.batch_delay = absl::Milliseconds(absl::GetFlag(FLAGS_batch_delay_ms));
  o.engine.max_seq_len = absl::GetFlag(FLAGS_max_seq_len);
  o.engine.max_queue = absl::GetFlag(FLAGS_max_queue);
  o.engine.max_new_tokens_limit = absl::GetFlag(FLAGS_max_new_tokens_limit);
  o.drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  return o;
}

absl::Status Serve(ServerOptions options, const sigset_t& signals) {
  kernels::SetCpuThreads(options.threads);
  auto loaded = LoadModel(options.model);
  if (!loaded.ok()) return loaded.status();
  const GptConfig config = (*loaded)->config;
  if (options.engine.max_seq_len == 0) options.engine.max_seq_len = config.n_positions;
  kernels::CpuOps ops;
  GptModel model(config, std::move((*loaded)->weights), ops);
  const BpeTokenizer* tokenizer = (*loaded)->tokenizer ? &*(*loaded)->tokenizer : nullptr;
  auto engine = Engine::Create(model, tokenizer, options.engine);
  if (!engine.ok()) return engine.status();

  FloverService service(**engine, tokenizer, {options.model, (*loaded)->stored_dtype, 1});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  std::printf("listening on %s:%d\n", host.c_str(), port);
  const EngineStats stats = (*engine)->Stats();
  std::printf("model %s: gpt2, %d layers, %d heads, %d wide, vocab %d, %d positions, %s weights, %s\n",
              options.model.c_str(), config.n_layer, config.n_head, config.n_embd,
              config.vocab_size, config.n_positions, (*loaded)->stored_dtype.c_str(),
              tokenizer ? "tokenizer" : "no tokenizer (token ids only)");
  std::printf("KV cache: %d slots x %d positions = %.1f MiB; scheduler %s, kv_shuffle %s, "
              "%d CPU threads\n",
              stats.slots, options.engine.max_seq_len, stats.kv_bytes_total / 1048576.0,
              std::string(SchedulerPolicyName(options.engine.scheduler.policy)).c_str(),
              options.engine.scheduler.kv_shuffle ? "on" : "off", kernels::CpuThreads());
  std::fflush(stdout);

  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "flover_server: signal %d, draining (up to %.0f s)\n", signal,
               absl::ToDoubleSeconds(options.drain_timeout));
  server->GetHealthCheckService()->SetServingStatus(false);
  (*engine)->Shutdown(options.drain_timeout);  // refuses new requests, finishes in-flight ones
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  std::fprintf(stderr, "flover_server: stopped\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace flover::server

int main(int argc, char** argv) {
  // Block the stop signals in every thread (gRPC's and the engine's inherit
  // this mask); the main thread takes them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::ParseCommandLine(argc, argv);
  auto options = flover::server::OptionsFromFlags();
  absl::Status st = options.ok() ? flover::server::Serve(*options, signals) : options.status();
  if (!st.ok()) {
    std::fprintf(stderr, "flover_server: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
