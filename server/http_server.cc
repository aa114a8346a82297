#include "server/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "util/prometheus.h"

namespace flover::server {

std::string RenderMetrics(const Engine& engine, const ModelDescription& model) {
  const ModelInfo& config = engine.model().info();
  const SchedulerOptions& s = engine.options().scheduler;
  prometheus::TextWriter out;
  out.Family("flover_model_info", "gauge",
             "The served model and how it runs; the value is always 1.");
  out.Sample("flover_model_info",
             {{"model", model.spec},
              {"architecture", config.architecture},
              {"stored_dtype", model.stored_dtype},
              {"matmul_dtype", model.matmul_dtype},
              {"kv_dtype", model.kv_dtype},
              {"device", model.device},
              {"device_name", model.device_name},
              {"tp", absl::StrCat(model.tp_size)},
              {"scheduler", std::string(SchedulerPolicyName(s.policy))},
              {"prefix_caching", engine.options().prefix_caching ? "on" : "off"}},
             1);
  engine.metrics().Write(out);
  return out.text();
}

absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& flag,
                                                          const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": expected HOST:PORT with a port in [0, 65535], got \"", address, "\""));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

void AddMetricsRoute(httplib::Server& http, std::function<std::string()> render) {
  http.Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                    httplib::Response& res) {
    res.set_content(render(), std::string(prometheus::kContentType).c_str());
  });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& flag, const std::string& address, int threads,
    const std::function<void(httplib::Server&)>& add_routes, const TlsFiles& tls) {
  auto host_port = ParseHostPort(flag, address);
  if (!host_port.ok()) return host_port.status();
  const std::string host = host_port->first;
  int port = host_port->second;
  std::unique_ptr<HttpServer> server(new HttpServer());
  if (tls.enabled()) {
    auto https = std::make_unique<httplib::SSLServer>(
        tls.cert.c_str(), tls.key.c_str(), tls.client_ca.empty() ? nullptr : tls.client_ca.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": cannot use --tls_cert/--tls_key", tls.client_ca.empty() ? "" : "/--tls_client_ca",
          " (", tls.cert, ", ", tls.key, "): not a matching PEM certificate and key"));
    }
    server->http_ = std::move(https);
  } else {
    server->http_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& http = *server->http_;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(std::max(1, threads)); };
  http.set_read_timeout(5, 0);
  http.set_write_timeout(5, 0);
  // The library's default accepts a body of any size into memory; cap it
  // as gRPC caps its messages. A larger Content-Length is answered 413
  // before the body is read.
  http.set_payload_max_length(kMaxHttpBodyBytes);
  // Debian's library listens with a backlog of 5: a burst of connections
  // overflows it and some fail. Keep the listening socket, and listen again
  // with the system's maximum once it is bound (Linux raises the backlog).
  int listen_fd = -1;
  http.set_socket_options([&listen_fd](int sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  add_routes(http);
  if (port == 0) {
    port = http.bind_to_any_port(host);
  } else if (!http.bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ", address));
  }
  http.set_socket_options(httplib::default_socket_options);  // drops the reference to listen_fd
  if (listen_fd >= 0 && ::listen(listen_fd, SOMAXCONN) != 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ", address));
  }
  server->port_ = port;
  server->url_ = absl::StrCat(tls.enabled() ? "https" : "http", "://",
                              address.substr(0, address.rfind(':')), ":", port);
  server->thread_ = std::thread([&http] { http.listen_after_bind(); });
  // stop() only ends a server that has started running.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!http.is_running() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
  if (!http.is_running()) {
    return absl::UnavailableError(absl::StrCat(flag, ": the server on ", address, " did not start"));
  }
  return server;
}

HttpServer::~HttpServer() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace flover::server
