#include "util/field_error.h"


#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace flover {
namespace {

constexpr absl::string_view kFieldPayload = "flover/field";

}  // namespace

absl::Status FieldError(absl::string_view field, absl::string_view detail, absl::StatusCode code) {
  absl::Status status(code, absl::StrCat(field, ": ", detail));
  status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

std::string ErrorField(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayload);
  return field.has_value() ? std::string(*field) : std::string();
}

}  // namespace flover
