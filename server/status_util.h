// The one place engine statuses become protocol statuses: gRPC's and HTTP's.
#ifndef FLOVER_SERVER_STATUS_UTIL_H_
#define FLOVER_SERVER_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace flover::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

// The HTTP status the HTTP front end answers `status` with.
int HttpStatusOf(const absl::Status& status);

}  // namespace flover::server

#endif  // FLOVER_SERVER_STATUS_UTIL_H_
