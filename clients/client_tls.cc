#include "clients/client_tls.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "util/file_util.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of the CA that signed the server's certificate: connect with TLS");
ABSL_FLAG(std::string, tls_cert, "", "Client certificate (PEM) for servers that require one");
ABSL_FLAG(std::string, tls_key, "", "Client private key (PEM) for --tls_cert");

namespace flover::clients {

absl::StatusOr<ClientTls> ClientTlsFromFlags() {
  ClientTls tls{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                absl::GetFlag(FLAGS_tls_key)};
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!tls.cert.empty() && tls.ca.empty()) {
    return absl::InvalidArgumentError("--tls_cert needs --tls_ca (TLS to the server)");
  }
  return tls;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const ClientTls& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  auto ca = ReadFlagFile("--tls_ca", tls.ca);
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!tls.cert.empty()) {
    auto cert = ReadFlagFile("--tls_cert", tls.cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadFlagFile("--tls_key", tls.key);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags(
    ClientTls* tls) {
  auto flags = ClientTlsFromFlags();
  if (!flags.ok()) return flags.status();
  if (tls != nullptr) *tls = *flags;
  return ChannelCredentials(*flags);
}

}  // namespace flover::clients
