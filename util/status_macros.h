// FLOVER_RETURN_IF_ERROR(expr): returns expr's absl::Status from the
// enclosing function when it is not OK.
// FLOVER_ASSIGN_OR_RETURN(lhs, expr): evaluates expr (an absl::StatusOr),
// returns its status when it is not OK, else moves its value into lhs
// (a declaration such as `auto x` or an existing variable).
#ifndef FLOVER_UTIL_STATUS_MACROS_H_
#define FLOVER_UTIL_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"

#define FLOVER_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    if (::absl::Status _flover_status = (expr); !_flover_status.ok()) { \
      return _flover_status;                            \
    }                                                   \
  } while (0)

#define FLOVER_STATUS_CONCAT_INNER(a, b) a##b
#define FLOVER_STATUS_CONCAT(a, b) FLOVER_STATUS_CONCAT_INNER(a, b)
#define FLOVER_ASSIGN_OR_RETURN(lhs, expr) \
  FLOVER_ASSIGN_OR_RETURN_IMPL(FLOVER_STATUS_CONCAT(_flover_status_or_, __LINE__), lhs, expr)
#define FLOVER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(*tmp)

#endif  // FLOVER_UTIL_STATUS_MACROS_H_
