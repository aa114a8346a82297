// TLS for the server's ports from PEM files (--tls_cert, --tls_key,
// --tls_client_ca). Errors name the flag and the file.
#ifndef FLOVER_SERVER_TLS_H_
#define FLOVER_SERVER_TLS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "server/server_options.h"

namespace flover::server {

// Whether the files load and the key matches the certificate, before
// anything else starts (gRPC's own error would only say it cannot listen).
// OK when TLS is off.
absl::Status CheckTlsFiles(const TlsFiles& tls);

// Plaintext, or TLS from the PEM files (requiring client certificates when a
// client CA is given).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> GrpcServerCredentials(const TlsFiles& tls);

}  // namespace flover::server

#endif  // FLOVER_SERVER_TLS_H_
