// Where a file that ships beside a binary may be: named by an environment
// variable, next to the executable, or in its (or the running test's) Bazel
// runfiles tree (workspace "flover").
#ifndef FLOVER_UTIL_RUNFILES_H_
#define FLOVER_UTIL_RUNFILES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace flover {

// The candidates, in the order to try: $`env_var` (when set and not empty),
// DIR/`beside` where DIR is the executable's directory (when `beside` is not
// empty), EXE.runfiles/flover/`runfile`, then $RUNFILES_DIR/flover/`runfile`
// and $TEST_SRCDIR/flover/`runfile`.
std::vector<std::string> RunfileCandidates(absl::string_view env_var, absl::string_view beside,
                                           absl::string_view runfile);

// The first candidate that exists and is readable, or "" when none is.
std::string FindRunfile(absl::string_view env_var, absl::string_view beside,
                        absl::string_view runfile);

}  // namespace flover

#endif  // FLOVER_UTIL_RUNFILES_H_
