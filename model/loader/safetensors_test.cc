#include "model/loader/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

using ::testing::HasSubstr;

// A safetensors file with the given JSON header and `data_bytes` of payload.
std::string MakeFile(const std::string& header, size_t data_bytes, char fill = 0) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, fill);
}

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  int64_t begin, int64_t end) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape,
                      ",\"data_offsets\":[", begin, ",", end, "]}");
}

std::string ErrorOf(const std::string& bytes) {
  auto f = SafetensorsFile::Parse(bytes, "m.safetensors");
  EXPECT_FALSE(f.ok());
  return std::string(f.status().message());
}

TEST(SafetensorsTest, ParsesAndConvertsAllFloatTypes) {
  std::string header = absl::StrCat(
      "{\"__metadata__\":{\"format\":\"pt\"},", Entry("a", "F32", "[2,2]", 0, 16), ",",
      Entry("b", "F16", "[3]", 16, 22), ",", Entry("c", "BF16", "[2]", 22, 26), "}");
  std::string bytes = MakeFile(header, 26);
  char* data = bytes.data() + 8 + header.size();
  const float a[4] = {1.5f, -2.0f, 0.0f, 1e-20f};
  std::memcpy(data, a, 16);
  const uint16_t b[3] = {0x3C00 /*1*/, 0xC000 /*-2*/, 0x0001 /*2^-24*/};
  std::memcpy(data + 16, b, 6);
  const uint16_t c[2] = {0x3F80 /*1*/, 0xC2F7 /*-123.5*/};
  std::memcpy(data + 22, c, 4);

  auto f = SafetensorsFile::Parse(bytes, "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors().size(), 3u);
  auto ra = f->ReadFloat("a", {2, 2});
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(*ra, std::vector<float>(a, a + 4));
  auto rb = f->ReadFloat("b", {3});
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(*rb, (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24)}));
  auto rc = f->ReadFloat("c", {2});
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, (std::vector<float>{1.0f, -123.5f}));
}

TEST(SafetensorsTest, HalfConversionIsExactForEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (exp == 0x1f) {
      EXPECT_TRUE(mant ? std::isnan(f) : std::isinf(f)) << h;
      continue;
    }
    const float want = exp == 0 ? sign * std::ldexp(float(mant), -24)
                                : sign * std::ldexp(float(1024 + mant), exp - 25);
    EXPECT_EQ(f, want) << h;
  }
}

TEST(SafetensorsTest, TruncatedFile) {
  EXPECT_THAT(ErrorOf("abc"), HasSubstr("truncated file"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("m.safetensors"));
}

TEST(SafetensorsTest, HeaderLengthPastEndOfFile) {
  std::string bytes = MakeFile("{}", 0);
  bytes[0] = 100;  // claims a 100-byte header; only 2 bytes follow
  EXPECT_THAT(ErrorOf(bytes), HasSubstr("runs past the end of the file"));
  std::string huge(8, '\xff');
  EXPECT_THAT(ErrorOf(huge), HasSubstr("runs past the end"));
}

TEST(SafetensorsTest, NonJsonHeader) {
  EXPECT_THAT(ErrorOf(MakeFile("{not json", 0)), HasSubstr("not a valid JSON object"));
  EXPECT_THAT(ErrorOf(MakeFile("[1,2]", 0)), HasSubstr("not a valid JSON object"));
  EXPECT_THAT(ErrorOf(MakeFile("{\"a\": 3}", 0)), HasSubstr("tensor 'a': entry is not a JSON object"));
}

TEST(SafetensorsTest, OffsetsOutOfRange) {
  const std::string e = ErrorOf(MakeFile("{" + Entry("w", "F32", "[4]", 0, 16) + "}", 8));
  EXPECT_THAT(e, HasSubstr("tensor 'w'"));
  EXPECT_THAT(e, HasSubstr("data_offsets end"));
  EXPECT_THAT(ErrorOf(MakeFile("{" + Entry("w", "F32", "[1]", -4, 0) + "}", 8)),
              HasSubstr("data_offsets begin"));
  EXPECT_THAT(ErrorOf(MakeFile("{" + Entry("w", "F32", "[0]", 8, 4) + "}", 8)),
              HasSubstr("end before they begin"));
  EXPECT_THAT(ErrorOf(MakeFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8)),
              HasSubstr("must be a list [begin, end]"));
}

TEST(SafetensorsTest, OverlappingTensors) {
  const std::string header =
      "{" + Entry("x", "F32", "[2]", 0, 8) + "," + Entry("y", "F32", "[2]", 4, 12) + "}";
  const std::string e = ErrorOf(MakeFile(header, 12));
  EXPECT_THAT(e, HasSubstr("'x' and 'y' overlap"));
}

TEST(SafetensorsTest, ShapeDoesNotMatchOffsets) {
  const std::string e = ErrorOf(MakeFile("{" + Entry("w", "F16", "[2,3]", 0, 8) + "}", 8));
  EXPECT_THAT(e, HasSubstr("tensor 'w'"));
  EXPECT_THAT(e, HasSubstr("shape [2, 3] of F16 needs 12"));
  EXPECT_THAT(ErrorOf(MakeFile("{" + Entry("w", "F32", "[1.5]", 0, 4) + "}", 8)),
              HasSubstr("shape dimension must be an integer"));
  // Dimensions whose product overflows are refused, not wrapped.
  EXPECT_THAT(ErrorOf(MakeFile("{" + Entry("w", "F32", "[1099511627776,1099511627776]", 0, 4) + "}", 8)),
              HasSubstr("too large"));
}

TEST(SafetensorsTest, WrongDtype) {
  EXPECT_THAT(ErrorOf(MakeFile("{" + Entry("w", "F8", "[2]", 0, 2) + "}", 8)),
              HasSubstr("tensor 'w': unknown dtype 'F8'"));
  // A known but non-float dtype parses, and is refused as a weight.
  auto f = SafetensorsFile::Parse(MakeFile("{" + Entry("w", "I64", "[1]", 0, 8) + "}", 8), "m.st");
  ASSERT_TRUE(f.ok());
  auto r = f->ReadFloat("w", {1});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'w' has dtype I64"));
}

TEST(SafetensorsTest, MissingTensorAndWrongShape) {
  auto f = SafetensorsFile::Parse(MakeFile("{" + Entry("w", "F32", "[2,2]", 0, 16) + "}", 16), "m.st");
  ASSERT_TRUE(f.ok());
  auto missing = f->ReadFloat("v", {2, 2});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("m.st: missing tensor 'v'"));
  auto shape = f->ReadFloat("w", {4});
  EXPECT_THAT(std::string(shape.status().message()),
              HasSubstr("'w' has shape [2, 2] but the config requires [4]"));
}

// A tensor with no elements ([5, 0]) reads as nothing, whole or by region
// (the fuzzer's first find: the read copied zero bytes from a null pointer,
// undefined behaviour; fuzz/corpus/safetensors/crash-empty-rows-null-memcpy).
TEST(SafetensorsTest, EmptyTensorReadsAsNothing) {
  auto f = SafetensorsFile::Parse(MakeFile("{" + Entry("e", "F32", "[5,0]", 0, 0) + "}", 0), "m.st");
  ASSERT_TRUE(f.ok()) << f.status();
  auto all = f->ReadFloat("e", {5, 0});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->empty());
  auto rows = f->ReadFloatRegion("e", {5, 0}, TensorRegion{1, 3, 0, 0});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(rows->empty());
}

TEST(SafetensorsTest, OpenMissingFileNamesIt) {
  auto f = SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("/nonexistent/model.safetensors"));
}

// Every prefix of a valid file, and every header byte set to each of seven
// hostile values, is either rejected with an error or parsed into in-bounds
// tensors.
TEST(SafetensorsTest, CorruptionsNeverReadOutOfBounds) {
  const std::string header =
      "{" + Entry("a", "F32", "[2,2]", 0, 16) + "," + Entry("b", "BF16", "[4]", 16, 24) + "}";
  const std::string good = MakeFile(header, 24, 1);
  for (size_t n = 0; n < good.size(); ++n) {
    auto f = SafetensorsFile::Parse(good.substr(0, n), "m");
    if (f.ok()) {
      for (const auto& [name, info] : f->tensors()) EXPECT_LE(8 + header.size() + info.end, n);
    }
  }
  for (size_t i = 0; i < 8 + header.size(); ++i) {
    for (char c : {'\0', '9', '"', '{', ']', '-', '\xff'}) {
      std::string bad = good;
      bad[i] = c;
      auto f = SafetensorsFile::Parse(bad, "m");
      if (!f.ok()) continue;
      for (const auto& [name, info] : f->tensors()) {
        EXPECT_LE(int64_t(8 + header.size()) + info.end, int64_t(bad.size()));
      }
    }
  }
}

}  // namespace
}  // namespace flover
