// FLOVER_RETURN_IF_ERROR(expr): returns expr's absl::Status from the
// enclosing function when it is not OK.
#ifndef FLOVER_UTIL_STATUS_MACROS_H_
#define FLOVER_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"

#define FLOVER_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    if (::absl::Status _flover_status = (expr); !_flover_status.ok()) { \
      return _flover_status;                            \
    }                                                   \
  } while (0)

#endif  // FLOVER_UTIL_STATUS_MACROS_H_
