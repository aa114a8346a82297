// Weights put on a backend: an embedding uploaded a block of rows at a time
// is the same table as the whole read; misshapen inputs are refused.
#include "model/weight_upload.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace flover {
namespace {

TEST(WeightUploadTest, RowsUploadedInBlocksEqualTheWholeRead) {
  auto backend = kernels::CpuBackend::Create();
  ASSERT_TRUE(backend.ok()) << backend.status();
  GeneratedSource source(5, [](absl::string_view) { return GeneratedSource::Fill::kRandom; });
  const WeightRecipe rows = RowSlice("table", {40, 7}, 3, 33);  // 30 rows of 7
  auto want = ReadRecipe(source, rows);
  ASSERT_TRUE(want.ok());
  for (int64_t chunk : {1, 4, 7, 29, 30, 100}) {
    auto buf = UploadRowsF32(**backend, source, rows, 7, 1.0f, chunk);
    ASSERT_TRUE(buf.ok()) << buf.status();
    EXPECT_EQ(buf->tensor().rows, 30);
    EXPECT_EQ(buf->tensor().cols, 7);
    std::vector<float> got(30 * 7);
    ASSERT_TRUE((*backend)->Download(buf->tensor(), got.data()).ok());
    EXPECT_EQ(got, *want) << "chunks of " << chunk;
  }
  {  // scaled on the way, in float32
    auto buf = UploadRowsF32(**backend, source, rows, 7, 8.0f, 4);
    ASSERT_TRUE(buf.ok()) << buf.status();
    std::vector<float> got(30 * 7);
    ASSERT_TRUE((*backend)->Download(buf->tensor(), got.data()).ok());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], (*want)[i] * 8.0f) << i;
  }
  EXPECT_FALSE(UploadRowsF32(**backend, source, rows, 8).ok());  // wrong width
  EXPECT_FALSE(UploadRowsF32(**backend, source,
                             Stack(WeightRecipe::kRows, {RowSlice("a", {4, 7}, 0, 2),
                                                         RowSlice("b", {4, 7}, 0, 2)}),
                             7)
                   .ok());  // two tensors
  const std::vector<float> six(6, 1.0f);
  auto misfit = PrepareMatrix(**backend, six.data(), 6, 2, 4, kernels::WeightLayout::kInOut);
  ASSERT_FALSE(misfit.ok());
  EXPECT_NE(misfit.status().message().find("is not [2, 4]"), std::string::npos) << misfit.status();
}

}  // namespace
}  // namespace flover
