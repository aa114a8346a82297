// API keys for the server's front ends: `--api_key_file` holds one key per
// line (blank lines and lines starting with # are skipped); a request must
// carry `authorization: Bearer KEY` with one of them. Keys are compared in
// constant time (per candidate key) and never logged; Reload swaps the set
// atomically (the server calls it on SIGHUP).
#ifndef FLOVER_SERVER_API_KEYS_H_
#define FLOVER_SERVER_API_KEYS_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover::server {

class ApiKeys {
 public:
  // Reads `path`; an unreadable file or one without keys is an error.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path);

  // Re-reads the file; on error the old keys stay.
  absl::Status Reload();

  // OK when `authorization` (a header or metadata value) is "Bearer KEY" with
  // a known KEY; Unauthenticated otherwise, with a message that names no key.
  absl::Status Check(absl::string_view authorization) const;

  size_t size() const;

 private:
  explicit ApiKeys(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<std::vector<std::string>> Read(const std::string& path);

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const std::vector<std::string>> keys_;  // guarded by mu_
};

// Constant-time equality (time depends on the lengths only).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace flover::server

#endif  // FLOVER_SERVER_API_KEYS_H_
