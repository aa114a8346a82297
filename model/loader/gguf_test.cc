// The GGUF reader: every tensor type dequantized bit for bit as gguf-py
// dequantizes it (tests/golden/gguf/quants.gguf, make_gguf_golden.py),
// metadata of every value type, and one clear error — never a crash — for
// malformed files.
#include "model/loader/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "kernels/ggml_dequant.h"
#include "model/loader/gguf_source.h"
#include "testing/gguf_writer.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::GgufWriter;

constexpr char kQuants[] = "tests/golden/gguf/quants.gguf";

TEST(GgufQuantsTest, EveryTypeDequantizesAsGgufPyBitForBit) {
  auto file = GgufFile::Open(kQuants);
  ASSERT_TRUE(file.ok()) << file.status();
  std::set<std::string> checked;
  int pairs = 0;
  for (const GgufTensor& t : file->tensors()) {
    if (t.name.size() < 9 || t.name.substr(t.name.size() - 9) != ".expected") continue;
    const std::string source = t.name.substr(0, t.name.size() - 9);
    const GgufTensor* q = file->FindTensor(source);
    ASSERT_NE(q, nullptr) << source;
    ASSERT_EQ(q->ne, t.ne) << source;
    auto got = file->ReadRows(*q, 0, q->rows());
    auto want = file->ReadRows(t, 0, t.rows());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got->size(), want->size());
    // Bits, not values: NaN payloads and signed zeros must come through too.
    for (size_t i = 0; i < got->size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &(*got)[i], 4);
      std::memcpy(&b, &(*want)[i], 4);
      ASSERT_EQ(a, b) << source << " value " << i << ": " << (*got)[i] << " vs " << (*want)[i];
    }
    // A range of rows is those rows of the whole.
    auto middle = file->ReadRows(*q, 1, 2);
    ASSERT_TRUE(middle.ok()) << middle.status();
    EXPECT_EQ(0, std::memcmp(middle->data(), got->data() + q->cols(), q->cols() * 4)) << source;
    checked.insert(q->type->name);
    ++pairs;
  }
  EXPECT_EQ(checked, (std::set<std::string>{"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                                            "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
                                            "IQ4_XS", "MXFP4"}));
  EXPECT_EQ(pairs, 16 + 8);  // random blocks for each, quantized data for 8
}

// --dtype=native reads Q3_K rows as Q6_K blocks and IQ4_NL rows as Q8_0
// ones, of the same values: they dequantize to gguf-py's values of the
// file's blocks, bit for bit.
TEST(GgufQuantsTest, StandInRowsHoldTheSameValues) {
  auto opened = GgufFile::Open(kQuants);
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto file = std::make_shared<const GgufFile>(std::move(*opened));
  GgufNaming naming;
  naming.name = [](absl::string_view hf, int* expert) {
    *expert = -1;
    return std::string(hf);
  };
  const std::unique_ptr<WeightSource> source = GgufWeightSource(file, naming);
  std::set<std::string> checked;
  for (const GgufTensor& t : file->tensors()) {
    const kernels::GgmlStandIn* stand_in = kernels::GgmlStandInFor(t.type->id);
    if (stand_in == nullptr || t.ne.size() != 2) continue;
    kernels::BlockFormat format;
    ASSERT_TRUE(source->BlockFormatOf(t.name, &format)) << t.name;
    EXPECT_EQ(static_cast<uint32_t>(kernels::GgmlTypeOfFormat(format)), static_cast<uint32_t>(stand_in->as));
    const std::vector<int64_t> shape = {t.rows(), t.cols()};
    auto rows = source->ReadBlockRows(t.name, shape, 1, t.rows());  // all but the first
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(static_cast<int64_t>(rows->size()), (t.rows() - 1) * kernels::BlockRowBytes(format, t.cols()));
    std::vector<float> got((t.rows() - 1) * t.cols());
    kernels::GgmlDequantize(*GgmlTypeOf(static_cast<uint32_t>(stand_in->as)), rows->data(),
                            static_cast<int64_t>(got.size()), got.data());
    const GgufTensor* expected = file->FindTensor(t.name + ".expected");
    ASSERT_NE(expected, nullptr) << t.name;
    auto want = file->ReadRows(*expected, 1, t.rows());
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got.size(), want->size());
    EXPECT_EQ(std::memcmp(got.data(), want->data(), got.size() * sizeof(float)), 0) << t.name;
    checked.insert(t.type->name);
  }
  EXPECT_EQ(checked, (std::set<std::string>{"Q3_K", "IQ4_NL"}));
  // Q2_K and IQ4_XS have no such form: read as float32.
  kernels::BlockFormat format;
  EXPECT_FALSE(GgufRowsFormat(static_cast<uint32_t>(GgmlType::kQ2_K), &format));
  EXPECT_FALSE(GgufRowsFormat(static_cast<uint32_t>(GgmlType::kIQ4_XS), &format));
}

TEST(GgufQuantsTest, TypeTableMatchesGgml) {
  EXPECT_EQ(GgmlTypeOf(12)->block_size, 256);
  EXPECT_EQ(GgmlTypeOf(12)->type_size, 144);
  EXPECT_STREQ(GgmlTypeOf(14)->name, "Q6_K");
  EXPECT_EQ(GgmlTypeOf(4), nullptr);  // Q4_2, removed from ggml
  EXPECT_EQ(GgmlTypeName(4), "type 4");
  EXPECT_FALSE(GgmlTypeOf(16)->dequantizes);  // IQ2_XXS: sized, not read
}

// A small valid file: metadata of every type and two tensors.
GgufWriter EveryType() {
  GgufWriter w;
  w.Kv("u8", GgufWriter::kU8, GgufWriter::Raw<uint8_t>(200))
      .Kv("i8", GgufWriter::kI8, GgufWriter::Raw<int8_t>(-5))
      .Kv("u16", GgufWriter::kU16, GgufWriter::Raw<uint16_t>(60000))
      .Kv("i16", GgufWriter::kI16, GgufWriter::Raw<int16_t>(-300))
      .U32("u32", 4000000000u)
      .I32("i32", -7)
      .F32("f32", 0.5f)
      .Bool("bool", true)
      .String("string", "h\xC3\xA9llo")
      .U64("u64", 1ull << 40)
      .Kv("i64", GgufWriter::kI64, GgufWriter::Raw<int64_t>(-(1ll << 40)))
      .F64("f64", 1e-300)
      .Strings("strings", {"a", "", "ccc"})
      .Array<int32_t>("ints", GgufWriter::kI32, {1, -2, 3})
      .Array<float>("floats", GgufWriter::kF32, {1.5f, -2.25f});
  // An array of two arrays of u8.
  std::string nested = GgufWriter::Raw<uint32_t>(GgufWriter::kArray) + GgufWriter::Raw<uint64_t>(2);
  for (int n : {1, 2}) {
    nested += GgufWriter::Raw<uint32_t>(GgufWriter::kU8) + GgufWriter::Raw<uint64_t>(n);
    for (int i = 0; i < n; ++i) nested += GgufWriter::Raw<uint8_t>(10 + i);
  }
  w.Kv("nested", GgufWriter::kArray, nested);
  w.F32Tensor("a", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  // 32 bytes: the file ends where b's data does, with no padding after it.
  w.F32Tensor("b", {8}, {9, 10, 11, 12, 13, 14, 15, 16});
  return w;
}

TEST(GgufFileTest, ReadsMetadataOfEveryType) {
  auto f = GgufFile::Parse(EveryType().Bytes(), "every.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->GetInt("u8"), 200);
  EXPECT_EQ(*f->GetInt("i8"), -5);
  EXPECT_EQ(*f->GetInt("u16"), 60000);
  EXPECT_EQ(*f->GetInt("i16"), -300);
  EXPECT_EQ(*f->GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*f->GetInt("i32"), -7);
  EXPECT_EQ(*f->GetFloat("f32"), 0.5);
  EXPECT_EQ(*f->GetFloat("i32"), -7.0);  // integers are numbers too
  EXPECT_TRUE(*f->GetBool("bool"));
  EXPECT_EQ(*f->GetString("string"), "h\xC3\xA9llo");
  EXPECT_EQ(*f->GetInt("u64"), 1ll << 40);
  EXPECT_EQ(*f->GetInt("i64"), -(1ll << 40));
  EXPECT_EQ(*f->GetFloat("f64"), 1e-300);
  EXPECT_EQ(**f->GetStrings("strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(**f->GetInts("ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(**f->GetFloats("floats"), (std::vector<double>{1.5, -2.25}));
  const GgufValue* nested = f->Find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[1].integers, (std::vector<int64_t>{10, 11}));

  EXPECT_TRUE(absl::IsNotFound(f->GetInt("missing").status()));
  auto wrong = f->GetInt("string");
  EXPECT_THAT(wrong.status().message(), HasSubstr("metadata string must be an integer, not string"));
  EXPECT_THAT(f->GetStrings("ints").status().message(), HasSubstr("not array of i32"));

  const GgufTensor* a = f->FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(a->rows(), 2);
  auto rows = f->ReadRows(*a, 1, 2);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, (std::vector<float>{5, 6, 7, 8}));
  EXPECT_TRUE(absl::IsOutOfRange(f->ReadRows(*a, 1, 3).status()));
  EXPECT_EQ((*f->ReadRows(*f->FindTensor("b"), 0, 1))[2], 11);
}

TEST(GgufFileTest, HonorsGeneralAlignment) {
  GgufWriter w;
  w.U32("general.alignment", 64).F32Tensor("x", {2}, {1, 2}).F32Tensor("y", {2}, {3, 4});
  auto f = GgufFile::Parse(w.Bytes(64), "aligned.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment(), 64);
  EXPECT_EQ(*f->ReadRows(*f->FindTensor("y"), 0, 1), (std::vector<float>{3, 4}));
  // The same tensors laid out for 32 are not at multiples of 64.
  auto misaligned = GgufFile::Parse(w.Bytes(32), "misaligned.gguf");
  EXPECT_THAT(misaligned.status().message(),
              HasSubstr("data offset 32 is not a multiple of the alignment 64"));
}

TEST(GgufFileTest, EveryTruncationIsAnErrorNamingAByte) {
  const std::string bytes = EveryType().Bytes();
  // Cut inside the header and metadata and tensor descriptions, and into the data.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = GgufFile::Parse(bytes.substr(0, n), "cut.gguf");
    ASSERT_FALSE(f.ok()) << "cut at " << n;
    EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << f.status();
    EXPECT_THAT(f.status().message(), HasSubstr("cut.gguf: ")) << f.status();
  }
}

// Bytes of a file with one key of `type` whose payload is `payload`.
std::string OneKey(uint32_t type, const std::string& payload) {
  return "GGUF" + GgufWriter::Raw<uint32_t>(3) + GgufWriter::Raw<uint64_t>(0) +
         GgufWriter::Raw<uint64_t>(1) + GgufWriter::Str("k") + GgufWriter::Raw(type) + payload;
}

std::string ErrorOf(const std::string& bytes) {
  auto f = GgufFile::Parse(bytes, "bad.gguf");
  return f.ok() ? "parsed" : std::string(f.status().message());
}

TEST(GgufFileTest, MalformedHeadersNameWhatIsWrong) {
  std::string b = EveryType().Bytes();
  b[0] = 'X';
  EXPECT_THAT(ErrorOf(b), HasSubstr("bad.gguf: at byte 0: not a GGUF file"));
  EXPECT_THAT(ErrorOf(EveryType().Bytes(32, 1)), HasSubstr("GGUF version 1 is not supported"));
  EXPECT_THAT(ErrorOf(EveryType().Bytes(32, 0x03000000)), HasSubstr("looks big-endian"));
  // Counts that cannot fit in what is left of the file.
  std::string many = "GGUF" + GgufWriter::Raw<uint32_t>(3) + GgufWriter::Raw<uint64_t>(1ull << 60) +
                     GgufWriter::Raw<uint64_t>(0);
  EXPECT_THAT(ErrorOf(many), HasSubstr("at byte 8: tensor count 1152921504606846976"));
  EXPECT_THAT(ErrorOf(OneKey(GgufWriter::kString, GgufWriter::Raw<uint64_t>(1ull << 62))),
              HasSubstr("at byte 37: k: a string of 4611686018427387904 bytes runs past the end"));
  EXPECT_THAT(ErrorOf(OneKey(GgufWriter::kArray, GgufWriter::Raw<uint32_t>(GgufWriter::kU32) +
                                                     GgufWriter::Raw<uint64_t>(1 << 20))),
              HasSubstr("at byte 37: k: an array of 1048576 u32 values cannot fit"));
  EXPECT_THAT(ErrorOf(OneKey(GgufWriter::kArray, GgufWriter::Raw<uint32_t>(GgufWriter::kU8) +
                                                     GgufWriter::Raw<uint64_t>(1 << 25) +
                                                     std::string(1 << 25, '\0'))),
              HasSubstr("k: an array of 33554432 elements (at most 16777216)"));
  EXPECT_THAT(ErrorOf(OneKey(99, "")), HasSubstr("at byte 33: k: unknown value type 99"));
  EXPECT_THAT(ErrorOf(OneKey(GgufWriter::kBool, GgufWriter::Raw<uint8_t>(2))),
              HasSubstr("k: a bool must be 0 or 1, got 2"));
  EXPECT_THAT(ErrorOf(OneKey(GgufWriter::kU64, GgufWriter::Raw<uint64_t>(~0ull))),
              HasSubstr("larger than this reader takes"));
  // Arrays of arrays nest only so deep.
  std::string deep;
  for (int i = 0; i < 6; ++i) {
    deep += GgufWriter::Raw<uint32_t>(GgufWriter::kArray) + GgufWriter::Raw<uint64_t>(1);
  }
  EXPECT_THAT(ErrorOf(OneKey(GgufWriter::kArray, deep + "padding padding")),
              HasSubstr("arrays nested deeper than 4"));
  GgufWriter dup;
  dup.U32("x", 1).U32("x", 2);
  EXPECT_THAT(ErrorOf(dup.Bytes()), HasSubstr("metadata key x appears twice"));
  GgufWriter align;
  align.U32("general.alignment", 48);
  EXPECT_THAT(ErrorOf(align.Bytes()), HasSubstr("general.alignment must be a u32 power of two, got 48"));
}

TEST(GgufFileTest, MalformedTensorsNameTheTensor) {
  auto one = [](uint32_t type, std::vector<uint64_t> ne, std::string data) {
    GgufWriter w;
    w.Tensor("t", type, ne, std::move(data));
    return ErrorOf(w.Bytes());
  };
  EXPECT_THAT(one(77, {4}, std::string(16, 0)), HasSubstr("tensor 't': unknown ggml type 77"));
  EXPECT_THAT(one(8, {48}, std::string(64, 0)),
              HasSubstr("tensor 't': its rows of 48 values are not whole Q8_0 blocks of 32"));
  EXPECT_THAT(one(0, {0}, ""), HasSubstr("tensor 't': dimensions [0] are empty or too large"));
  EXPECT_THAT(one(0, {1, 1, 1, 1, 1}, ""), HasSubstr("tensor 't': 5 dimensions (1 to 4)"));
  EXPECT_THAT(one(0, {1ull << 30, 1ull << 30}, ""), HasSubstr("are empty or too large"));
  // Data that the file does not hold.
  std::string short_data = [] {
    GgufWriter w;
    w.Tensor("t", 0, {64}, std::string(256, 0));
    std::string b = w.Bytes();
    return b.substr(0, b.size() - 100);
  }();
  EXPECT_THAT(ErrorOf(short_data), HasSubstr("tensor 't': its 256 bytes at data offset 0 run past the end"));
  // Two tensors over the same bytes.
  std::string overlap = [] {
    GgufWriter w;
    w.F32Tensor("a", {16}, std::vector<float>(16)).F32Tensor("b", {16}, std::vector<float>(16));
    std::string b = w.Bytes();
    // b's description: name, 1 dimension, ne, type, then its offset (64).
    const size_t offset_at = b.find(GgufWriter::Str("b")) + 9 + 4 + 8 + 4;
    b.replace(offset_at, 8, GgufWriter::Raw<uint64_t>(32));
    return b;
  }();
  EXPECT_THAT(ErrorOf(overlap), HasSubstr("tensors 'a' and 'b' overlap"));
  GgufWriter dup;
  dup.F32Tensor("t", {1}, {1}).F32Tensor("t", {1}, {2});
  EXPECT_THAT(ErrorOf(dup.Bytes()), HasSubstr("tensor 't': the name appears twice"));
}

TEST(GgufFileTest, ATypeItDoesNotReadIsRefusedByName) {
  GgufWriter w;
  w.Tensor("iq", 16, {256}, std::string(66, 0));  // IQ2_XXS
  auto f = GgufFile::Parse(w.Bytes(), "iq.gguf");
  ASSERT_TRUE(f.ok()) << f.status();  // the file is valid; the tensor is not read
  auto rows = f->ReadRows(*f->FindTensor("iq"), 0, 1);
  EXPECT_THAT(rows.status().message(),
              HasSubstr("iq.gguf: tensor 'iq' is IQ2_XXS, which Flover does not read"));
}

}  // namespace
}  // namespace flover
