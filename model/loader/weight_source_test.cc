// Regions of tensors from mapped checkpoints and from the built-in
// generator, and recipes assembling a rank's parameters from them.
#include "model/loader/weight_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "model/loader/random_blocks.h"

namespace flover {
namespace {

using ::testing::HasSubstr;

// Rows [r0, r1) x columns [c0, c1) of a row-major matrix with `cols` columns.
std::vector<float> Sub(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                       int64_t c1) {
  std::vector<float> out;
  for (int64_t r = r0; r < r1; ++r) {
    out.insert(out.end(), m.begin() + r * cols + c0, m.begin() + r * cols + c1);
  }
  return out;
}

// A safetensors file of one [rows, cols] tensor per dtype, values v(i) = i/8
// (exact in F16 and BF16 up to 256).
std::string WriteFile(const std::string& dir, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  std::string data, header = "{";
  int64_t at = 0;
  for (const char* dtype : {"F32", "BF16", "F16"}) {
    const int elem = std::string(dtype) == "F32" ? 4 : 2;
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(i) / 8;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (elem == 4) {
        data.append(reinterpret_cast<const char*>(&bits), 4);
      } else if (std::string(dtype) == "BF16") {
        const uint16_t b = static_cast<uint16_t>(bits >> 16);
        data.append(reinterpret_cast<const char*>(&b), 2);
      } else {  // F16 of a value in [0, 256) with at most 8 significant bits
        int e = 0;
        uint16_t h = 0;
        if (v != 0) {
          float m = v;
          while (m >= 2) m /= 2, ++e;
          while (m < 1) m *= 2, --e;
          h = static_cast<uint16_t>(((e + 15) << 10) | static_cast<uint16_t>((m - 1) * 1024));
        }
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    absl::StrAppend(&header, at ? ", " : "", "\"", std::string("transformer.") + dtype,
                    "\": {\"dtype\": \"", dtype, "\", \"shape\": [", rows, ", ", cols,
                    "], \"data_offsets\": [", at, ", ", at + n * elem, "]}");
    at += n * elem;
  }
  header += "}";
  std::string bytes(8, '\0');
  uint64_t len = header.size();
  std::memcpy(bytes.data(), &len, 8);
  bytes += header + data;
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << bytes;
  return dir;
}

TEST(WeightSourceTest, CheckpointRegionsAreSlicesOfTheWholeTensor) {
  char tmpl[] = "/tmp/flover_ws_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const int64_t R = 37, C = 53;  // regions cross page boundaries
  WriteFile(tmpl, R, C);
  auto ckpt = Checkpoint::Open(tmpl);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  CheckpointSource source(std::move(*ckpt), "transformer.", "F32");
  for (const char* name : {"F32", "BF16", "F16"}) {
    ASSERT_TRUE(source.Has(name)) << name;  // through the alias prefix
    auto whole = source.Read(name, {R, C}, TensorRegion{0, R, 0, C});
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_EQ(whole->size(), size_t(R * C));
    EXPECT_EQ((*whole)[R * C - 1], float(R * C - 1) / 8) << name;
    for (TensorRegion g : {TensorRegion{3, 20, 0, C}, TensorRegion{0, R, 7, 31},
                           TensorRegion{10, 11, 52, 53}, TensorRegion{5, 5, 0, 0}}) {
      auto part = source.Read(name, {R, C}, g);
      ASSERT_TRUE(part.ok()) << part.status();
      EXPECT_EQ(*part, Sub(*whole, C, g.row_begin, g.row_end, g.col_begin, g.col_end)) << name;
    }
    // Pages given back after a read come back from the file.
    auto again = source.Read(name, {R, C}, TensorRegion{0, R, 0, C});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *whole);
  }
  auto outside = source.Read("F32", {R, C}, TensorRegion{0, R + 1, 0, C});
  ASSERT_FALSE(outside.ok());
  EXPECT_THAT(std::string(outside.status().message()), HasSubstr("is outside [37, 53]"));
  auto shape = source.Read("F32", {C, R}, TensorRegion{});
  ASSERT_FALSE(shape.ok());
  EXPECT_THAT(std::string(shape.status().message()), HasSubstr("has shape [37, 53]"));
  EXPECT_FALSE(source.Has("F64"));
  std::filesystem::remove_all(tmpl);
}

// GEMM weights are read in the file's dtype: the same values as the float32
// read, as the file's own bits; a recipe keeps the dtype when its blocks
// share it and is float32 when they mix.
TEST(WeightSourceTest, StoredReadsKeepTheFileDtype) {
  char tmpl[] = "/tmp/flover_ws_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const int64_t R = 37, C = 53;
  WriteFile(tmpl, R, C);
  auto ckpt = Checkpoint::Open(tmpl);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  CheckpointSource source(std::move(*ckpt), "transformer.", "F32");
  const std::pair<const char*, kernels::DType> kinds[] = {
      {"F32", kernels::DType::kF32}, {"BF16", kernels::DType::kBF16}, {"F16", kernels::DType::kF16}};
  for (const auto& [name, dtype] : kinds) {
    EXPECT_EQ(source.StoredDtypeOf(name), dtype) << name;
    for (TensorRegion g : {TensorRegion{0, R, 0, C}, TensorRegion{3, 20, 0, C},
                           TensorRegion{0, R, 7, 31}, TensorRegion{5, 5, 0, 0}}) {
      auto stored = source.ReadStored(name, {R, C}, g);
      ASSERT_TRUE(stored.ok()) << stored.status();
      EXPECT_EQ(stored->dtype, dtype) << name;
      EXPECT_EQ(stored->size(), g.numel());
      auto floats = source.Read(name, {R, C}, g);
      ASSERT_TRUE(floats.ok());
      EXPECT_EQ(stored->ToFloat(), *floats) << name;
      if (dtype == kernels::DType::kBF16) {  // the file's bits: the float's top half
        for (int64_t i = 0; i < g.numel(); ++i) {
          uint32_t bits;
          std::memcpy(&bits, &(*floats)[i], 4);
          ASSERT_EQ(stored->bits[i], bits >> 16) << i;
        }
      }
    }
  }
  EXPECT_EQ(source.StoredDtypeOf("nothing"), kernels::DType::kF32);
  auto outside = source.ReadStored("BF16", {R, C}, TensorRegion{0, R + 1, 0, C});
  ASSERT_FALSE(outside.ok());
  EXPECT_THAT(std::string(outside.status().message()), HasSubstr("is outside [37, 53]"));
  auto shape = source.ReadStored("F16", {C, R}, TensorRegion{});
  ASSERT_FALSE(shape.ok());
  EXPECT_THAT(std::string(shape.status().message()), HasSubstr("has shape [37, 53]"));

  // Recipes: one dtype kept (rows and columns), a mix widened, zeros float32.
  for (const WeightRecipe& r :
       {Stack(WeightRecipe::kRows, {RowSlice("BF16", {R, C}, 1, 4), RowSlice("BF16", {R, C}, 30, 37)}),
        Stack(WeightRecipe::kCols, {ColSlice("F16", {R, C}, 0, 5), ColSlice("F16", {R, C}, 40, 53)}),
        Whole("BF16", {R, C})}) {
    auto stored = ReadRecipeStored(source, r);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->dtype, source.StoredDtypeOf(r.blocks[0].tensor));
    EXPECT_EQ(stored->ToFloat(), *ReadRecipe(source, r));
  }
  const WeightRecipe mixed =
      Stack(WeightRecipe::kRows, {RowSlice("BF16", {R, C}, 0, 2), RowSlice("F16", {R, C}, 2, 4)});
  auto widened = ReadRecipeStored(source, mixed);
  ASSERT_TRUE(widened.ok()) << widened.status();
  EXPECT_EQ(widened->dtype, kernels::DType::kF32);
  EXPECT_EQ(widened->f32, *ReadRecipe(source, mixed));
  auto zeros = ReadRecipeStored(source, Zeros(6));
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(zeros->dtype, kernels::DType::kF32);
  EXPECT_EQ(zeros->f32, std::vector<float>(6, 0.0f));
  std::filesystem::remove_all(tmpl);
}

TEST(WeightSourceTest, GeneratedValuesDoNotDependOnTheRegionRead) {
  GeneratedSource source(7, [](absl::string_view name) {
    using Fill = GeneratedSource::Fill;
    return name == "ones" ? Fill::kOnes : name == "none" ? Fill::kAbsent : Fill::kRandom;
  });
  auto whole = source.Read("w", {9, 11}, TensorRegion{0, 9, 0, 11});
  ASSERT_TRUE(whole.ok());
  auto part = source.Read("w", {9, 11}, TensorRegion{2, 5, 3, 10});
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, Sub(*whole, 11, 2, 5, 3, 10));
  float lo = 1, hi = -1;
  for (float v : *whole) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_LT(lo, -0.01f);
  EXPECT_GT(hi, 0.01f);
  EXPECT_LE(hi, 0.02f * std::sqrt(3.0f));
  auto other = source.Read("v", {9, 11}, TensorRegion{0, 9, 0, 11});
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *whole);  // each tensor its own stream
  auto ones = source.Read("ones", {4}, TensorRegion{0, 1, 0, 4});
  ASSERT_TRUE(ones.ok());
  EXPECT_EQ(*ones, std::vector<float>(4, 1.0f));
  EXPECT_FALSE(source.Has("none"));
  EXPECT_FALSE(source.Read("none", {4}, TensorRegion{}).ok());
}

// An expert's rows of a 3-D tensor of experts, and half of a fused 2-D
// one, read as matrices of their own: whole rows (one region), a band of
// columns (a region per row), the shape checked against the packed one.
TEST(WeightSourceTest, SlicedTensorsAreRowsOfTheirPackedOnes) {
  auto inner = std::make_unique<GeneratedSource>(
      3, [](absl::string_view) { return GeneratedSource::Fill::kRandom; });
  const GeneratedSource* packed = inner.get();
  SlicedSource source(std::move(inner), [](absl::string_view name, SlicedSource::Slice* out) {
    if (name == "expert2.up") *out = {"experts", {4, 10, 6}, 2, 5, 5};  // rows 5..9 of expert 2
    else if (name == "shared.up") *out = {"fused", {8, 6}, -1, 4, 4};   // rows 4..7
    else return false;
    return true;
  });
  auto all = packed->Read("experts", {4, 10, 6}, TensorRegion{0, 4, 0, 60});
  ASSERT_TRUE(all.ok());
  const std::vector<float> expert2(all->begin() + 2 * 60, all->begin() + 3 * 60);
  auto whole = source.Read("expert2.up", {5, 6}, TensorRegion{0, 5, 0, 6});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, Sub(expert2, 6, 5, 10, 0, 6));
  auto band = source.Read("expert2.up", {5, 6}, TensorRegion{1, 4, 2, 5});
  ASSERT_TRUE(band.ok()) << band.status();
  EXPECT_EQ(*band, Sub(expert2, 6, 6, 9, 2, 5));
  auto stored = source.ReadStored("expert2.up", {5, 6}, TensorRegion{1, 4, 2, 5});
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->f32, *band);
  auto fused = packed->Read("fused", {8, 6}, TensorRegion{0, 8, 0, 6});
  auto half = source.Read("shared.up", {4, 6}, TensorRegion{0, 4, 1, 6});
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(*half, Sub(*fused, 6, 4, 8, 1, 6));
  EXPECT_EQ(source.Read("other", {2, 2}, TensorRegion{0, 2, 0, 2}).ok(), true);  // as the inner source has it
  auto wrong = source.Read("expert2.up", {6, 6}, TensorRegion{});
  EXPECT_THAT(std::string(wrong.status().message()),
              HasSubstr("tensor 'expert2.up' is rows 5..10 of matrix 2 of 'experts' [4, 10, 6]; the model's "
                        "hyper-parameters need [6, 6]"));
  EXPECT_FALSE(source.Read("expert2.up", {5, 6}, TensorRegion{0, 6, 0, 6}).ok());  // outside
}

TEST(WeightSourceTest, GeneratedBlocksAreRandomAccessAndReadAsTheirValues) {
  using kernels::BlockFormat;
  GeneratedSource source(
      7, [](absl::string_view name) {
        return name == "plain" ? GeneratedSource::Fill::kRandom : GeneratedSource::Fill::kBlocks;
      },
      BlockFormat::kQ4_K);
  EXPECT_EQ(source.stored_dtype(), "Q4_K (random blocks)");
  BlockFormat f;
  ASSERT_TRUE(source.BlockFormatOf("w", &f));
  EXPECT_EQ(f, BlockFormat::kQ4_K);
  EXPECT_FALSE(source.BlockFormatOf("plain", &f));
  const int K = 512, rows = 6;
  const int64_t row_bytes = kernels::BlockRowBytes(BlockFormat::kQ4_K, K);
  auto whole = source.ReadBlockRows("w", {rows, K}, 0, rows);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), size_t(rows * row_bytes));
  // Rows 2..5 alone are the same bytes: row r is a function of (seed, name, r).
  auto part = source.ReadBlockRows("w", {rows, K}, 2, 5);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, std::vector<uint8_t>(whole->begin() + 2 * row_bytes, whole->begin() + 5 * row_bytes));
  auto other = source.ReadBlockRows("v", {rows, K}, 0, rows);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *whole);
  // Read gives the blocks' values as ggml dequantizes them, any region.
  const std::vector<float> values = DequantizeBlockRows(BlockFormat::kQ4_K, whole->data(), rows, K);
  auto read = source.Read("w", {rows, K}, TensorRegion{1, 4, 100, 300});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, Sub(values, K, 1, 4, 100, 300));
  double sum_sq = 0;
  for (float v : values) sum_sq += double(v) * v;
  const double rms = std::sqrt(sum_sq / values.size());
  EXPECT_GT(rms, 0.1 / std::sqrt(K));  // roughly unit / sqrt(K), not zero or huge
  EXPECT_LT(rms, 10 / std::sqrt(K));
  // Rows that are not whole blocks are plain random values; so is every
  // tensor of a source without a format.
  auto odd = source.Read("w", {3, 100}, TensorRegion{0, 3, 0, 100});
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_FALSE(source.ReadBlockRows("w", {3, 100}, 0, 3).ok());
  GeneratedSource floats(7, [](absl::string_view) { return GeneratedSource::Fill::kBlocks; });
  EXPECT_FALSE(floats.BlockFormatOf("w", &f));
  EXPECT_EQ(*floats.Read("w", {3, 100}, TensorRegion{0, 3, 0, 100}), *odd);
}

// A row-split layer's share (columns of each row) stays in blocks when it
// starts at a block and its width is one the kernels take: each row's
// blocks there, holding exactly those columns' values.
TEST(WeightSourceTest, ColumnSlicesOfBlockRowsStayBlocks) {
  using kernels::BlockFormat;
  for (BlockFormat format : {BlockFormat::kQ4_K, BlockFormat::kQ8_0}) {
    GeneratedSource source(5, [](absl::string_view) { return GeneratedSource::Fill::kBlocks; }, format);
    const int K = 1024, rows = 3;
    for (const auto& [begin, end] : {std::pair{0, 512}, {512, 1024}, {256, 768}}) {
      auto stored = ReadRecipeStored(source, ColSlice("w", {rows, K}, begin, end), /*keep_blocks=*/true);
      ASSERT_TRUE(stored.ok()) << stored.status();
      ASSERT_TRUE(stored->is_blocks()) << begin;
      ASSERT_EQ(stored->spans.size(), 1u);
      EXPECT_EQ(stored->spans[0].format, format);
      EXPECT_EQ(stored->spans[0].rows, rows);
      const int width = end - begin;
      ASSERT_EQ(static_cast<int64_t>(stored->blocks.size()), rows * kernels::BlockRowBytes(format, width));
      auto values = source.Read("w", {rows, K}, TensorRegion{0, rows, begin, end});
      ASSERT_TRUE(values.ok()) << values.status();
      EXPECT_EQ(DequantizeBlockRows(format, stored->blocks.data(), rows, width), *values) << begin;
    }
  }
  // Not at a block (Q4_K's are 256 values), or a width the kernels do not
  // take (Q8_0: 64 at a time): float32.
  GeneratedSource q4k(5, [](absl::string_view) { return GeneratedSource::Fill::kBlocks; }, BlockFormat::kQ4_K);
  auto inside = ReadRecipeStored(q4k, ColSlice("w", {3, 1024}, 128, 640), true);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_FALSE(inside->is_blocks());
  GeneratedSource q8(5, [](absl::string_view) { return GeneratedSource::Fill::kBlocks; }, BlockFormat::kQ8_0);
  auto narrow = ReadRecipeStored(q8, ColSlice("w", {3, 1024}, 32, 64), true);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_FALSE(narrow->is_blocks());
}

TEST(WeightSourceTest, RecipesStackRowsAndPlaceColumns) {
  GeneratedSource source(3, [](absl::string_view) { return GeneratedSource::Fill::kRandom; });
  const std::vector<float> a = *source.Read("a", {6, 4}, TensorRegion{0, 6, 0, 4});
  const std::vector<float> b = *source.Read("b", {6, 4}, TensorRegion{0, 6, 0, 4});
  // Rows 1..3 of a over rows 4..6 of b.
  auto rows = ReadRecipe(source, Stack(WeightRecipe::kRows,
                                       {RowSlice("a", {6, 4}, 1, 3), RowSlice("b", {6, 4}, 4, 6)}));
  ASSERT_TRUE(rows.ok());
  std::vector<float> want = Sub(a, 4, 1, 3, 0, 4);
  const std::vector<float> tail = Sub(b, 4, 4, 6, 0, 4);
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(*rows, want);
  // Columns 0..1 of a beside columns 2..4 of b: each row [a_r0 a_r1 b_r2 b_r3].
  auto cols = ReadRecipe(source, Stack(WeightRecipe::kCols,
                                       {ColSlice("a", {6, 4}, 0, 2), ColSlice("b", {6, 4}, 2, 4)}));
  ASSERT_TRUE(cols.ok());
  ASSERT_EQ(cols->size(), 24u);
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ((*cols)[r * 4 + 0], a[r * 4 + 0]);
    EXPECT_EQ((*cols)[r * 4 + 1], a[r * 4 + 1]);
    EXPECT_EQ((*cols)[r * 4 + 2], b[r * 4 + 2]);
    EXPECT_EQ((*cols)[r * 4 + 3], b[r * 4 + 3]);
  }
  auto zeros = ReadRecipe(source, Zeros(5));
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(*zeros, std::vector<float>(5, 0.0f));
  auto ragged = ReadRecipe(source, Stack(WeightRecipe::kCols,
                                         {RowSlice("a", {6, 4}, 0, 2), RowSlice("b", {6, 4}, 0, 3)}));
  EXPECT_FALSE(ragged.ok());
}

}  // namespace
}  // namespace flover
