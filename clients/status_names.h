// Names of gRPC status codes, for reports ("UNAVAILABLE", not 14).
#ifndef FLOVER_CLIENTS_STATUS_NAMES_H_
#define FLOVER_CLIENTS_STATUS_NAMES_H_

#include <grpcpp/support/status.h>

namespace flover::clients {

inline const char* StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i <= 16 ? kNames[i] : "UNKNOWN";
}

}  // namespace flover::clients

#endif  // FLOVER_CLIENTS_STATUS_NAMES_H_
