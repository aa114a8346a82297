// Prometheus metrics over HTTP: GET /metrics on --metrics_listen, rendered
// from the engine's lock-free instruments (a scrape never waits on the
// engine loop) plus an info metric naming the model, dtypes, device and
// scheduler.
#ifndef FLOVER_SERVER_METRICS_HTTP_H_
#define FLOVER_SERVER_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "server/flover_service.h"

namespace httplib {
class Server;
}

namespace flover::server {

// Splits HOST:PORT (HOST may be [v6]); `flag` names the flag in the error.
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& flag,
                                                          const std::string& address);

// The whole exposition: flover_model_info, then the engine's families.
std::string RenderMetrics(const Engine& engine, const ModelDescription& model);

class MetricsHttpServer {
 public:
  // Serves `render()` at GET /metrics on `address` (HOST:PORT; port 0 picks
  // a free port). Unavailable if it cannot listen there.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> render);
  ~MetricsHttpServer();  // stops serving

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace flover::server

#endif  // FLOVER_SERVER_METRICS_HTTP_H_
