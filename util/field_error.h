// Refusals that name the request field they are about, so every front end
// reports the field the same way: the engine's and the servers' validation
// return them, and the OpenAI API puts the field in its error's `param`.
#ifndef FLOVER_UTIL_FIELD_ERROR_H_
#define FLOVER_UTIL_FIELD_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace flover {

// A refusal about one field of a request. Its message reads "field: detail"
// (what a gRPC client and a log see); the field also travels beside the
// message as a status payload, so a front end that reports the field apart
// (OpenAI's `param`) takes it from the error, not from its text.
absl::Status FieldError(absl::string_view field, absl::string_view detail,
                        absl::StatusCode code = absl::StatusCode::kInvalidArgument);

// The field a FieldError names ("max_new_tokens", "messages[1].role"); empty
// for any other status.
std::string ErrorField(const absl::Status& status);

}  // namespace flover

#endif  // FLOVER_UTIL_FIELD_ERROR_H_
