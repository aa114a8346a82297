#include "server/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "util/file_util.h"

namespace flover::server {

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

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> GrpcServerCredentials(const TlsFiles& tls) {
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

}  // namespace flover::server
