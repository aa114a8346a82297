// The server's command line: every flag flover_server takes (besides
// --device, --dtype and --kv_dtype, kernels/backend_flags.h), parsed into
// ServerOptions and checked before anything is loaded. docs/serving.md lists
// them all.
#ifndef FLOVER_SERVER_SERVER_FLAGS_H_
#define FLOVER_SERVER_SERVER_FLAGS_H_

#include "absl/status/statusor.h"
#include "server/server_options.h"

namespace flover::server {

// The options the flags give (after absl::ParseCommandLine). Errors name the
// flag: a bad value, a flag missing its partner, a TLS file that does not
// load, no model where the default one is absent.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

}  // namespace flover::server

#endif  // FLOVER_SERVER_SERVER_FLAGS_H_
