#include "server/api_keys.h"

#include <cstdlib>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flover::server {
namespace {

using ::testing::HasSubstr;

std::string WriteKeys(const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/keys";
  std::ofstream(path) << text;
  return path;
}

TEST(ApiKeysTest, ChecksBearerKeysAndReloads) {
  const std::string path = WriteKeys("# team keys\nalpha-123\n\n  beta-456  \n");
  auto keys = ApiKeys::Load(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2u);
  EXPECT_TRUE((*keys)->Check("Bearer alpha-123").ok());
  EXPECT_TRUE((*keys)->Check("Bearer beta-456").ok());  // surrounding spaces trimmed
  for (const char* bad : {"", "alpha-123", "Bearer ", "Bearer alpha-12", "Bearer alpha-1234",
                          "bearer alpha-123", "Bearer # team keys"}) {
    const absl::Status st = (*keys)->Check(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_THAT(std::string(st.message()), ::testing::Not(HasSubstr("alpha"))) << bad;
  }
  WriteKeys("gamma-789\n");
  ASSERT_TRUE((*keys)->Reload().ok());
  EXPECT_TRUE((*keys)->Check("Bearer gamma-789").ok());
  EXPECT_FALSE((*keys)->Check("Bearer alpha-123").ok());
  // A file that lost its keys is refused; the old keys stay.
  WriteKeys("# nothing\n");
  EXPECT_THAT(std::string((*keys)->Reload().message()), HasSubstr("has no keys"));
  EXPECT_TRUE((*keys)->Check("Bearer gamma-789").ok());
  EXPECT_THAT(std::string(ApiKeys::Load("/nonexistent/keys").status().message()),
              HasSubstr("--api_key_file"));
}

TEST(ApiKeysTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0", 2), "a"));
}

}  // namespace
}  // namespace flover::server
