// Reads whole files, with errors that name the path; tells files exist.
#ifndef FLOVER_UTIL_FILE_UTIL_H_
#define FLOVER_UTIL_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover {

// NotFound when the file cannot be opened, DataLoss on a read error.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// ReadFile for a file a command-line flag names: any error is
// InvalidArgument, "FLAG: PATH: why" (the user's input, not the machine's).
absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path);

// True when `path` names a regular file (following links).
bool FileExists(const std::string& path);

}  // namespace flover

#endif  // FLOVER_UTIL_FILE_UTIL_H_
