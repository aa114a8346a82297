// The gRPC service: thin. Each Generate call is a ServerWriteReactor fed by
// the engine through a TokenSink (no thread per stream); unary calls read the
// engine's info and stats. Statuses are converted in status_util only.
#ifndef FLOVER_SERVER_FLOVER_SERVICE_H_
#define FLOVER_SERVER_FLOVER_SERVICE_H_

#include <string>

#include "tokenizer/tokenizer.h"
#include "engine/engine.h"
#include "server/api_keys.h"
#include "server/request_session.h"
#include "server/request_convert.h"
#include "proto/flover.grpc.pb.h"

namespace flover::server {

struct ModelDescription {
  std::string spec;
  std::string stored_dtype;
  std::string matmul_dtype;  // "f32" or "bf16"
  std::string kv_dtype;      // "f32" or "bf16"
  int tp_size = 1;
  std::string device = "cpu";        // --device
  std::string device_name;           // the GPU's or CPU's name
  int64_t device_memory_bytes = 0;   // a GPU's memory; 0 on the CPU
  std::string served_name;           // --served_model_name (or its default)
};

// Generate is registered raw (bytes in, bytes out) so that a request that
// is not a valid GenerateRequest gets INVALID_ARGUMENT naming the problem;
// gRPC's own parse failure answers a bare UNIMPLEMENTED.
class FloverService final
    : public v1::Flover::WithRawCallbackMethod_Generate<v1::Flover::CallbackService> {
 public:
  // What `serving` points to, and `keys` (may be null), must outlive the
  // service. With keys, every call needs `authorization: Bearer KEY`.
  FloverService(ServingContext serving, ModelDescription model, const ApiKeys* keys = nullptr);

  // `request`: a serialized v1::GenerateRequest; writes v1::GenerateResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::Stats* response) override;
  // With --embeddings (serving.pooling set); else FAILED_PRECONDITION.
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context, const v1::EmbedRequest* request,
                                  v1::EmbedResponse* response) override;

 private:
  ServingContext serving_;
  Engine& engine_;
  const ModelDescription model_;
  const ApiKeys* keys_;
};

// OK without keys; else whether the call's `authorization` metadata holds one.
absl::Status Authenticate(const ApiKeys* keys, const grpc::CallbackServerContext& context);

}  // namespace flover::server

#endif  // FLOVER_SERVER_FLOVER_SERVICE_H_
