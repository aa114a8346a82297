#include "server/image_fetch.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flover::server {
namespace {

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

// A host name or IPv4 address: letters, digits, dots and hyphens.
bool IsHostName(absl::string_view host) {
  return !host.empty() && host.size() <= 253 &&
         std::all_of(host.begin(), host.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-'; });
}

bool IsPort(absl::string_view port, int* value) {
  return !port.empty() && port.size() <= 5 && absl::SimpleAtoi(port, value) && *value >= 1 && *value <= 65535;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseImageHosts(const std::string& flag) {
  std::vector<std::string> hosts;
  for (absl::string_view entry : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
    const std::string e = absl::AsciiStrToLower(absl::StripAsciiWhitespace(entry));
    const std::vector<absl::string_view> parts = absl::StrSplit(e, absl::MaxSplits(':', 1));
    int port = 0;
    if (!IsHostName(parts[0]) || (parts.size() == 2 && !IsPort(parts[1], &port))) {
      return Bad(absl::StrCat("--image_url_hosts: \"", e,
                              "\" is not a host or host:port (a name or IPv4 address, no scheme or path)"));
    }
    hosts.push_back(e);
  }
  return hosts;
}

absl::StatusOr<std::string> FetchImage(const std::string& url, const ImageFetchOptions& o) {
  absl::string_view rest = url;
  const bool https = absl::ConsumePrefix(&rest, "https://");
  if (!https && !absl::ConsumePrefix(&rest, "http://")) {
    return Bad("only data:, http:// and https:// URLs are taken");
  }
  const size_t end = std::min(rest.find_first_of("/?#"), rest.size());
  const absl::string_view authority = rest.substr(0, end);
  std::string path(rest.substr(end));
  if (path.empty() || path[0] != '/') path.insert(0, "/");
  if (const size_t hash = path.find('#'); hash != std::string::npos) path.resize(hash);
  const std::string lower = absl::AsciiStrToLower(authority);
  const std::vector<absl::string_view> parts = absl::StrSplit(lower, absl::MaxSplits(':', 1));
  int port = https ? 443 : 80;
  if (!IsHostName(parts[0]) || (parts.size() == 2 && !IsPort(parts[1], &port))) {
    return Bad(absl::StrCat("the URL's host \"", authority, "\" is not a host name or IPv4 address with a port"));
  }
  const std::string host(parts[0]);
  const std::string with_port = absl::StrCat(host, ":", port);
  if (o.hosts.empty()) {
    return Bad("remote image URLs are off: send the image as a data: URL, or start the server with "
               "--image_url_hosts naming the hosts it may fetch from");
  }
  if (std::find(o.hosts.begin(), o.hosts.end(), host) == o.hosts.end() &&
      std::find(o.hosts.begin(), o.hosts.end(), with_port) == o.hosts.end()) {
    return Bad(absl::StrCat("the host ", with_port, " is not one this server fetches images from (",
                            absl::StrJoin(o.hosts, ", "), ")"));
  }
  httplib::Client client(absl::StrCat(https ? "https://" : "http://", host, ":", port));
  const int64_t ms = absl::ToInt64Milliseconds(o.timeout);
  client.set_connection_timeout(ms / 1000, (ms % 1000) * 1000);
  client.set_read_timeout(ms / 1000, (ms % 1000) * 1000);
  client.set_follow_location(false);
  std::string body;
  bool too_large = false;
  httplib::Result r = client.Get(path, [&](const char* data, size_t n) {
    if (static_cast<int64_t>(body.size() + n) > o.max_bytes) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (too_large) {
    return Bad(absl::StrCat("the image at ", url, " is more than ", o.max_bytes, " bytes; at most that many are taken"));
  }
  if (!r) return Bad(absl::StrCat("fetching ", url, " failed: ", httplib::to_string(r.error())));
  if (r->status != 200) {
    return Bad(absl::StrCat("fetching ", url, " gave HTTP ", r->status,
                            r->status >= 300 && r->status < 400 ? " (redirects are not followed)" : ""));
  }
  return body;
}

}  // namespace flover::server
