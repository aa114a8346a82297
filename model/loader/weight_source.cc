#include "model/loader/weight_source.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/loader/random_blocks.h"

namespace flover {
namespace {

// FNV-1a: a tensor's name as part of its random stream's key.
uint64_t NameKey(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// SplitMix64's output for counter i of the stream keyed `key`: random access
// into a stream the generator would produce in order.
uint64_t Mix(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::string CheckpointSource::Resolve(absl::string_view tensor) const {
  if (checkpoint_.Find(tensor) == nullptr && !prefix_.empty()) {
    std::string aliased = absl::StrCat(prefix_, tensor);
    if (checkpoint_.Find(aliased) != nullptr) return aliased;
  }
  return std::string(tensor);
}

bool CheckpointSource::Has(absl::string_view tensor) const {
  return checkpoint_.Find(Resolve(tensor)) != nullptr;
}

absl::StatusOr<std::vector<float>> CheckpointSource::Read(absl::string_view tensor,
                                                          const std::vector<int64_t>& shape,
                                                          const TensorRegion& region) const {
  return checkpoint_.ReadFloatRegion(Resolve(tensor), shape, region);
}

absl::StatusOr<StoredValues> CheckpointSource::ReadStored(absl::string_view tensor,
                                                         const std::vector<int64_t>& shape,
                                                         const TensorRegion& region) const {
  return checkpoint_.ReadRegion(Resolve(tensor), shape, region);
}

kernels::DType CheckpointSource::StoredDtypeOf(absl::string_view tensor) const {
  const TensorInfo* info = checkpoint_.Find(Resolve(tensor));
  return info == nullptr ? kernels::DType::kF32 : BackendDtype(info->dtype);
}

absl::StatusOr<StoredValues> WeightSource::ReadStored(absl::string_view tensor,
                                                      const std::vector<int64_t>& shape,
                                                      const TensorRegion& region) const {
  auto values = Read(tensor, shape, region);
  if (!values.ok()) return values.status();
  StoredValues v;
  v.f32 = std::move(*values);
  return v;
}

GeneratedSource::Fill GeneratedSource::FillOf(absl::string_view tensor) const {
  const Fill fill = kind_(tensor);
  return fill == Fill::kBlocks && !blocks_.has_value() ? Fill::kRandom : fill;
}

std::string GeneratedSource::stored_dtype() const {
  return blocks_.has_value() ? absl::StrCat(kernels::InfoOf(*blocks_).name, " (random blocks)")
                             : "F32";
}

bool GeneratedSource::BlockFormatOf(absl::string_view tensor, kernels::BlockFormat* format) const {
  if (FillOf(tensor) != Fill::kBlocks) return false;
  *format = *blocks_;
  return true;
}

absl::StatusOr<std::vector<uint8_t>> GeneratedSource::ReadBlockRows(
    absl::string_view tensor, const std::vector<int64_t>& shape, int64_t row_begin,
    int64_t row_end) const {
  if (FillOf(tensor) != Fill::kBlocks || shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("built-in model: tensor '", tensor, "' is not stored in blocks"));
  }
  const kernels::BlockFormat f = *blocks_;
  const int64_t K = shape[1];
  if (K % kernels::InfoOf(f).block_values != 0 || row_begin < 0 || row_end > shape[0] ||
      row_begin > row_end) {
    return absl::OutOfRangeError(absl::StrCat("built-in model: tensor '", tensor, "': rows [",
                                              row_begin, ", ", row_end, ") of ", K, "-value rows in ",
                                              kernels::InfoOf(f).name));
  }
  const int64_t row_bytes = kernels::BlockRowBytes(f, K);
  std::vector<uint8_t> out(static_cast<size_t>((row_end - row_begin) * row_bytes));
  const uint64_t key = seed_ ^ NameKey(tensor);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const std::vector<uint8_t> row =
        RandomBlockRows(f, 1, static_cast<int>(K), static_cast<uint32_t>(Mix(key, r)));
    std::copy(row.begin(), row.end(), out.begin() + (r - row_begin) * row_bytes);
  }
  return out;
}

absl::StatusOr<std::vector<float>> GeneratedSource::Read(absl::string_view tensor,
                                                         const std::vector<int64_t>& shape,
                                                         const TensorRegion& region) const {
  Fill fill = FillOf(tensor);
  // Rows that are not a whole number of blocks cannot be blocks: plain values.
  if (fill == Fill::kBlocks &&
      (shape.size() != 2 || shape[1] % kernels::InfoOf(*blocks_).block_values != 0)) {
    fill = Fill::kRandom;
  }
  if (fill == Fill::kAbsent) {
    return absl::NotFoundError(absl::StrCat("built-in model: no tensor '", tensor, "'"));
  }
  TensorInfo info;
  info.shape = shape;
  const TensorRegion all = info.All();
  if (region.row_begin < 0 || region.row_end > all.row_end || region.row_begin > region.row_end ||
      region.col_begin < 0 || region.col_end > all.col_end || region.col_begin > region.col_end) {
    return absl::OutOfRangeError(absl::StrCat("built-in model: tensor '", tensor,
                                              "': region outside the tensor"));
  }
  if (fill == Fill::kBlocks) {  // the blocks' values, as ggml dequantizes them
    auto rows = ReadBlockRows(tensor, shape, region.row_begin, region.row_end);
    if (!rows.ok()) return rows.status();
    const int K = static_cast<int>(all.col_end);
    const std::vector<float> values =
        DequantizeBlockRows(*blocks_, rows->data(), static_cast<int>(region.rows()), K);
    std::vector<float> out;
    out.reserve(region.numel());
    for (int64_t r = 0; r < region.rows(); ++r) {
      out.insert(out.end(), values.begin() + r * K + region.col_begin,
                 values.begin() + r * K + region.col_end);
    }
    return out;
  }
  std::vector<float> out(region.numel(), fill == Fill::kOnes ? 1.0f : 0.0f);
  if (fill != Fill::kRandom) return out;
  // Uniform on [-a, a] with std 0.02, as GPT-2 and Llama initialise.
  const float a = 0.02f * std::sqrt(3.0f);
  const uint64_t key = seed_ ^ NameKey(tensor);
  float* o = out.data();
  for (int64_t r = region.row_begin; r < region.row_end; ++r) {
    for (int64_t c = region.col_begin; c < region.col_end; ++c) {
      const uint64_t bits = Mix(key, static_cast<uint64_t>(r * all.col_end + c));
      *o++ = a * static_cast<float>((bits >> 40) * 0x1.0p-23 - 1.0);
    }
  }
  return out;
}

bool SlicedSource::Has(absl::string_view tensor) const {
  Slice s;
  return locate_(tensor, &s) ? inner_->Has(s.tensor) : inner_->Has(tensor);
}

kernels::DType SlicedSource::StoredDtypeOf(absl::string_view tensor) const {
  Slice s;
  return inner_->StoredDtypeOf(locate_(tensor, &s) ? absl::string_view(s.tensor) : tensor);
}

absl::StatusOr<std::vector<TensorRegion>> SlicedSource::Regions(absl::string_view tensor, const Slice& s,
                                                                const std::vector<int64_t>& shape,
                                                                const TensorRegion& region) const {
  const bool stacked = s.index >= 0;
  const int64_t C = s.shape.back(), R = s.shape[s.shape.size() - 2];
  if (s.shape.size() != (stacked ? 3u : 2u) || shape != std::vector<int64_t>{s.rows, C} || s.row_begin < 0 ||
      s.row_begin + s.rows > R || (stacked && s.index >= s.shape[0])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "' is rows ", s.row_begin, "..", s.row_begin + s.rows,
        stacked ? absl::StrCat(" of matrix ", s.index) : std::string(), " of '", s.tensor, "' [",
        absl::StrJoin(s.shape, ", "), "]; the model's hyper-parameters need [", absl::StrJoin(shape, ", "), "]"));
  }
  if (region.row_begin < 0 || region.row_end > s.rows || region.row_begin > region.row_end || region.col_begin < 0 ||
      region.col_end > C || region.col_begin > region.col_end) {
    return absl::OutOfRangeError(absl::StrCat("tensor '", tensor, "': region outside the tensor"));
  }
  std::vector<TensorRegion> out;
  const int64_t r0 = s.row_begin + region.row_begin, r1 = s.row_begin + region.row_end;
  if (!stacked) {
    out.push_back({r0, r1, region.col_begin, region.col_end});
  } else if (region.col_begin == 0 && region.col_end == C) {
    // A 3-D tensor is [E, R * C] to a source: whole rows are one run.
    out.push_back({s.index, s.index + 1, r0 * C, r1 * C});
  } else {
    for (int64_t r = r0; r < r1; ++r) {
      out.push_back({s.index, s.index + 1, r * C + region.col_begin, r * C + region.col_end});
    }
  }
  return out;
}

absl::StatusOr<std::vector<float>> SlicedSource::Read(absl::string_view tensor, const std::vector<int64_t>& shape,
                                                      const TensorRegion& region) const {
  Slice s;
  if (!locate_(tensor, &s)) return inner_->Read(tensor, shape, region);
  auto regions = Regions(tensor, s, shape, region);
  if (!regions.ok()) return regions.status();
  // An empty region still checks the tensor is there with its shape.
  if (region.numel() == 0) return inner_->Read(s.tensor, s.shape, TensorRegion{});
  std::vector<float> out;
  for (const TensorRegion& r : *regions) {
    auto part = inner_->Read(s.tensor, s.shape, r);
    if (!part.ok()) return part.status();
    out.insert(out.end(), part->begin(), part->end());
  }
  return out;
}

absl::StatusOr<StoredValues> SlicedSource::ReadStored(absl::string_view tensor, const std::vector<int64_t>& shape,
                                                      const TensorRegion& region) const {
  Slice s;
  if (!locate_(tensor, &s)) return inner_->ReadStored(tensor, shape, region);
  auto regions = Regions(tensor, s, shape, region);
  if (!regions.ok()) return regions.status();
  StoredValues out;
  out.dtype = inner_->StoredDtypeOf(s.tensor);
  if (region.numel() == 0) {
    auto st = inner_->ReadStored(s.tensor, s.shape, TensorRegion{});
    if (!st.ok()) return st.status();
    return out;
  }
  for (const TensorRegion& r : *regions) {
    auto part = inner_->ReadStored(s.tensor, s.shape, r);
    if (!part.ok()) return part.status();
    if (part->dtype != out.dtype || part->is_blocks()) {
      return absl::InternalError(absl::StrCat("tensor '", s.tensor, "' read in another dtype"));
    }
    out.f32.insert(out.f32.end(), part->f32.begin(), part->f32.end());
    out.bits.insert(out.bits.end(), part->bits.begin(), part->bits.end());
  }
  return out;
}

WeightRecipe Whole(std::string tensor, std::vector<int64_t> shape) {
  TensorInfo info;
  info.shape = shape;
  return WeightRecipe{WeightRecipe::kRows, {{std::move(tensor), std::move(shape), info.All()}}};
}

WeightRecipe RowSlice(std::string tensor, std::vector<int64_t> shape, int64_t begin, int64_t end) {
  WeightRecipe r = Whole(std::move(tensor), std::move(shape));
  r.blocks[0].region.row_begin = begin;
  r.blocks[0].region.row_end = end;
  return r;
}

WeightRecipe ColSlice(std::string tensor, std::vector<int64_t> shape, int64_t begin, int64_t end) {
  WeightRecipe r = Whole(std::move(tensor), std::move(shape));
  r.blocks[0].region.col_begin = begin;
  r.blocks[0].region.col_end = end;
  return r;
}

WeightRecipe Zeros(int64_t n) {
  WeightRecipe r;
  r.zeros = n;
  return r;
}

WeightRecipe Stack(WeightRecipe::Axis axis, std::vector<WeightRecipe> parts) {
  WeightRecipe out;
  out.axis = axis;
  for (WeightRecipe& p : parts) {
    for (WeightBlock& b : p.blocks) out.blocks.push_back(std::move(b));
  }
  return out;
}

namespace {

// The recipe's blocks, read one at a time by `read` (block -> StatusOr of
// its values as a vector<T>), stacked or placed side by side.
template <typename T, typename Read>
absl::StatusOr<std::vector<T>> Assemble(const WeightRecipe& recipe, const Read& read) {
  if (recipe.blocks.size() == 1) return read(recipe.blocks[0]);
  int64_t total = 0, rows = -1, cols = 0;
  for (const WeightBlock& b : recipe.blocks) {
    total += b.region.numel();
    if (recipe.axis == WeightRecipe::kCols) {
      if (rows >= 0 && b.region.rows() != rows) {
        return absl::InternalError(absl::StrCat("recipe: '", b.tensor, "' has ", b.region.rows(),
                                                " rows, the blocks before it ", rows));
      }
      rows = b.region.rows();
      cols += b.region.cols();
    }
  }
  std::vector<T> out(total);
  int64_t at = 0;  // kRows: values written; kCols: columns placed
  for (const WeightBlock& b : recipe.blocks) {
    absl::StatusOr<std::vector<T>> part = read(b);
    if (!part.ok()) return part.status();
    if (recipe.axis == WeightRecipe::kRows) {
      std::copy(part->begin(), part->end(), out.begin() + at);
      at += static_cast<int64_t>(part->size());
    } else {
      const int64_t w = b.region.cols();
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(part->begin() + r * w, part->begin() + (r + 1) * w, out.begin() + r * cols + at);
      }
      at += w;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<float>> ReadRecipe(const WeightSource& source,
                                              const WeightRecipe& recipe) {
  if (recipe.blocks.empty()) return std::vector<float>(recipe.zeros, 0.0f);
  auto values = Assemble<float>(recipe, [&](const WeightBlock& b) {
    return source.Read(b.tensor, b.shape, b.region);
  });
  if (values.ok() && !recipe.exact()) {
    for (float& v : *values) v = (v + recipe.offset) * recipe.scale;
  }
  return values;
}

WeightRecipe PlusOne(WeightRecipe recipe) {
  recipe.offset = 1.0f;
  return recipe;
}

WeightRecipe Scaled(WeightRecipe recipe, float scale) {
  recipe.scale *= scale;
  return recipe;
}

absl::StatusOr<std::vector<uint8_t>> WeightSource::ReadBytes(absl::string_view tensor, const std::vector<int64_t>&,
                                                             const TensorRegion&) const {
  return absl::UnimplementedError(absl::StrCat("'", tensor, "' is not a tensor of bytes here"));
}

absl::StatusOr<std::vector<uint8_t>> CheckpointSource::ReadBytes(absl::string_view tensor,
                                                                 const std::vector<int64_t>& shape,
                                                                 const TensorRegion& region) const {
  return checkpoint_.ReadBytesRegion(Resolve(tensor), shape, region);
}

absl::StatusOr<WeightSource::MappedRows> WeightSource::MapBlockRows(absl::string_view tensor,
                                                                   const std::vector<int64_t>&) const {
  return absl::UnimplementedError(absl::StrCat("'", tensor, "' is not in mapped memory"));
}

absl::StatusOr<std::vector<uint8_t>> WeightSource::ReadBlockRows(absl::string_view tensor,
                                                                 const std::vector<int64_t>&,
                                                                 int64_t, int64_t) const {
  return absl::UnimplementedError(absl::StrCat("'", tensor, "' is not stored in blocks"));
}

namespace {

// The recipe as stored blocks, or nullopt when it is not rows of block
// tensors whose rows (or the columns of them read, a row-split layer's
// share under tensor parallelism: whole blocks) the kernels take.
absl::StatusOr<std::optional<StoredValues>> ReadBlocks(const WeightSource& source,
                                                       const WeightRecipe& recipe) {
  if (recipe.blocks.empty() || !recipe.exact() ||
      (recipe.axis != WeightRecipe::kRows && recipe.blocks.size() > 1)) {
    return std::nullopt;
  }
  const int64_t K = recipe.blocks[0].region.cols();
  std::vector<kernels::BlockFormat> formats;
  for (const WeightBlock& b : recipe.blocks) {
    kernels::BlockFormat f;
    if (b.shape.size() != 2 || b.region.cols() != K || !source.BlockFormatOf(b.tensor, &f) ||
        !kernels::BlockRowsFit(f, K) || b.region.col_begin % kernels::InfoOf(f).block_values != 0) {
      return std::nullopt;
    }
    formats.push_back(f);
  }
  StoredValues out;
  for (size_t i = 0; i < recipe.blocks.size(); ++i) {
    const WeightBlock& b = recipe.blocks[i];
    auto bytes = source.ReadBlockRows(b.tensor, b.shape, b.region.row_begin, b.region.row_end);
    if (!bytes.ok()) return bytes.status();
    const int64_t rows = b.region.rows();
    const int64_t row_bytes = kernels::BlockRowBytes(formats[i], b.shape[1]);
    if (static_cast<int64_t>(bytes->size()) != rows * row_bytes) {
      return absl::InternalError(absl::StrCat("'", b.tensor, "': ", bytes->size(), " bytes for ",
                                              rows, " rows"));
    }
    if (K == b.shape[1]) {
      out.blocks.insert(out.blocks.end(), bytes->begin(), bytes->end());
    } else {  // the blocks of columns [col_begin, col_end) of each row
      const int64_t skip = kernels::BlockRowBytes(formats[i], b.region.col_begin);
      const int64_t take = kernels::BlockRowBytes(formats[i], K);
      for (int64_t r = 0; r < rows; ++r) {
        const auto row = bytes->begin() + r * row_bytes + skip;
        out.blocks.insert(out.blocks.end(), row, row + take);
      }
    }
    if (!out.spans.empty() && out.spans.back().format == formats[i]) {
      out.spans.back().rows += static_cast<int>(rows);
    } else {
      out.spans.push_back({formats[i], static_cast<int>(rows)});
    }
    out.block_values += rows * K;
  }
  return std::optional<StoredValues>(std::move(out));
}

}  // namespace

absl::StatusOr<StoredValues> ReadRecipeStored(const WeightSource& source,
                                              const WeightRecipe& recipe, bool keep_blocks) {
  if (keep_blocks) {
    auto blocks = ReadBlocks(source, recipe);
    if (!blocks.ok()) return blocks.status();
    if (blocks->has_value()) return std::move(**blocks);
  }
  kernels::DType dtype = kernels::DType::kF32;
  for (size_t i = 0; i < recipe.blocks.size(); ++i) {
    const kernels::DType d = source.StoredDtypeOf(recipe.blocks[i].tensor);
    if (i > 0 && d != dtype) {
      dtype = kernels::DType::kF32;  // a mix: float32 holds them all
      break;
    }
    dtype = d;
  }
  StoredValues out;
  if (dtype == kernels::DType::kF32 || !recipe.exact()) {
    auto values = ReadRecipe(source, recipe);
    if (!values.ok()) return values.status();
    out.f32 = std::move(*values);
    return out;
  }
  auto bits = Assemble<uint16_t>(
      recipe, [&](const WeightBlock& b) -> absl::StatusOr<std::vector<uint16_t>> {
        auto v = source.ReadStored(b.tensor, b.shape, b.region);
        if (!v.ok()) return v.status();
        if (v->dtype != dtype) {
          return absl::InternalError(absl::StrCat("'", b.tensor, "' was read as ",
                                                  kernels::DTypeName(v->dtype), ", not ",
                                                  kernels::DTypeName(dtype)));
        }
        return std::move(v->bits);
      });
  if (!bits.ok()) return bits.status();
  out.dtype = dtype;
  out.bits = std::move(*bits);
  return out;
}

absl::Status ReadInto(const WeightSource& source, const WeightRecipe& recipe, ParamDest dest,
                      bool keep_blocks) {
  if (dest.f32 != nullptr) {
    auto v = ReadRecipe(source, recipe);
    if (!v.ok()) return v.status();
    *dest.f32 = std::move(*v);
  } else if (dest.stored != nullptr) {
    auto v = ReadRecipeStored(source, recipe, keep_blocks);
    if (!v.ok()) return v.status();
    *dest.stored = std::move(*v);
  }
  return absl::OkStatus();
}

absl::Status CheckWeightPart(const WeightPart& part, int n_layer) {
  if (part.layer_begin < 0 || part.layer_begin > n_layer || part.layer_end > n_layer ||
      (part.layer_end >= 0 && part.layer_end < part.layer_begin)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers [", part.layer_begin, ", ", part.layer_end, ") of ", n_layer));
  }
  return absl::OkStatus();
}

}  // namespace flover
