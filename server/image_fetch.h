// Remote images (an image_url part's http(s) URL, a Messages API image's
// "url" source), fetched only from hosts the operator named
// (--image_url_hosts): the server makes no other outbound requests.
#ifndef FLOVER_SERVER_IMAGE_FETCH_H_
#define FLOVER_SERVER_IMAGE_FETCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace flover::server {

struct ImageFetchOptions {
  // Lower-case "host" (any port) or "host:port" entries; empty: remote
  // images are refused.
  std::vector<std::string> hosts;
  int64_t max_bytes = int64_t{20} << 20;  // the image's body, as ImageLimits::max_bytes
  absl::Duration timeout = absl::Seconds(10);  // to connect, and between reads
};

// --image_url_hosts: a comma-separated list of host or host:port entries
// (names or IPv4 addresses, lower-cased; no schemes, paths or wildcards).
absl::StatusOr<std::vector<std::string>> ParseImageHosts(const std::string& flag);

// The body of `url` (http:// or https://, certificates checked against
// the system's), where its host is one `options` names; redirects are not
// followed (they could leave the list). InvalidArgument saying why not
// (a host not named, a status other than 200, a body past max_bytes, a
// connection that failed or timed out).
absl::StatusOr<std::string> FetchImage(const std::string& url, const ImageFetchOptions& options);

}  // namespace flover::server

#endif  // FLOVER_SERVER_IMAGE_FETCH_H_
