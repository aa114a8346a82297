#include "util/field_error.h"

#include "gtest/gtest.h"

namespace flover {
namespace {

TEST(FieldErrorTest, MessageNamesTheFieldAndThePayloadCarriesIt) {
  absl::Status st = FieldError("messages[1].role", "'tool' is not supported");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "messages[1].role: 'tool' is not supported");
  EXPECT_EQ(ErrorField(st), "messages[1].role");
}

TEST(FieldErrorTest, KeepsTheCodeItIsGiven) {
  absl::Status st = FieldError("model", "\"x\" is not served here", absl::StatusCode::kNotFound);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorField(st), "model");
}

TEST(FieldErrorTest, OtherErrorsNameNoField) {
  // A message that merely looks like "field: detail" names no field.
  EXPECT_EQ(ErrorField(absl::InvalidArgumentError("prompt: is empty")), "");
  EXPECT_EQ(ErrorField(absl::OkStatus()), "");
  // The field survives a copy (statuses pass through queues and sessions).
  absl::Status copy = FieldError("top_p", "must be in (0, 1]");
  absl::Status again = copy;
  EXPECT_EQ(ErrorField(again), "top_p");
}

}  // namespace
}  // namespace flover
