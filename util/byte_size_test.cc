#include "util/byte_size.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flover {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, ReadsUnitsAsWritten) {
  EXPECT_EQ(*ParseByteSize("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("512m"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("2GB"), int64_t{2000000000});
  EXPECT_EQ(*ParseByteSize(" 64 KiB "), 65536);
  EXPECT_EQ(*ParseByteSize("12345"), 12345);
  EXPECT_EQ(*ParseByteSize("7B"), 7);
  EXPECT_EQ(*ParseByteSize("0"), 0);
}

TEST(ByteSizeTest, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "GiB", "-1GiB", "4 GiBs", "1.5", "1e9", "4..2G", "99999999TiB", "x"}) {
    auto v = ParseByteSize(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("is not a memory size")) << bad;
  }
}

TEST(ByteSizeTest, FormatsInTheLargestUnit) {
  EXPECT_EQ(FormatByteSize(100), "100 B");
  EXPECT_EQ(FormatByteSize(int64_t{4} << 30), "4.0 GiB");
  EXPECT_EQ(FormatByteSize(int64_t{1536} << 20), "1.5 GiB");
}

}  // namespace
}  // namespace flover
