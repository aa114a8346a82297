// The HTTP front ends' server: cpp-httplib on HOST:PORT with a pool of
// worker threads, the routes registered by the caller (Prometheus metrics,
// the OpenAI-compatible API). Requests are served on the pool, never on the
// engine thread.
#ifndef FLOVER_SERVER_HTTP_SERVER_H_
#define FLOVER_SERVER_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "server/flover_service.h"
#include "server/server_options.h"

namespace httplib {
class Server;
}

namespace flover::server {

// Splits HOST:PORT (HOST may be [v6]); `flag` names the flag in the error.
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& flag,
                                                          const std::string& address);

// The Prometheus exposition: flover_model_info, then the engine's families.
std::string RenderMetrics(const Engine& engine, const ModelDescription& model);

// GET /metrics serving `render()`.
void AddMetricsRoute(httplib::Server& http, std::function<std::string()> render);

class HttpServer {
 public:
  // Binds `address` (HOST:PORT; port 0 picks a free port; `flag` names it in
  // errors), lets `add_routes` register handlers, and serves on `threads`
  // worker threads (each request holds one while it runs, a streamed
  // completion included). Unavailable if it cannot listen there.
  // With `tls` enabled it serves HTTPS (and with tls.client_ca requires
  // client certificates signed by it).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& flag, const std::string& address, int threads,
      const std::function<void(httplib::Server&)>& add_routes, const TlsFiles& tls = {});
  ~HttpServer();  // stops serving

  int port() const { return port_; }
  // http(s)://HOST:PORT as given, with the port bound.
  const std::string& url() const { return url_; }

 private:
  HttpServer() = default;

  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::string url_;
};

}  // namespace flover::server

#endif  // FLOVER_SERVER_HTTP_SERVER_H_
