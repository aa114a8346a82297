// The clients' TLS flags (--tls_ca, --tls_cert, --tls_key), shared by
// flover_client and flover_loadgen: credentials for a gRPC channel, and the
// same files for an HTTPS client.
#ifndef FLOVER_CLIENTS_CLIENT_TLS_H_
#define FLOVER_CLIENTS_CLIENT_TLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace flover::clients {

struct ClientTls {
  std::string ca;    // PEM file of the CA that signed the server; empty = plaintext
  std::string cert;  // client certificate and key, for servers that require one
  std::string key;
  bool enabled() const { return !ca.empty(); }
};

// The flags' values; InvalidArgument for --tls_cert without --tls_key (or
// the reverse) or either without --tls_ca.
absl::StatusOr<ClientTls> ClientTlsFromFlags();

// Plaintext credentials, or TLS ones from the files (errors name the file).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const ClientTls& tls);

// ChannelCredentials(ClientTlsFromFlags()); the flags' values go to *tls
// when not null (for HTTPS clients).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags(
    ClientTls* tls = nullptr);

}  // namespace flover::clients

#endif  // FLOVER_CLIENTS_CLIENT_TLS_H_
