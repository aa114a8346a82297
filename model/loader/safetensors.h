// Reader for the safetensors format (8-byte little-endian header length, a
// JSON header, then raw tensor bytes). Every file is untrusted input: sizes,
// offsets, shapes and dtypes are all checked before any tensor is exposed, and
// every error names the file, the tensor and the problem.
//
// Open maps the file (read-only, private) rather than reading it: a tensor's
// pages are read from the page cache when a region of it is converted, and
// dropped from this process's resident set right after, so loading a rank's
// slice of a model costs that slice, not the file. (The file must not be
// truncated while it is open.)
#ifndef FLOVER_MODEL_LOADER_SAFETENSORS_H_
#define FLOVER_MODEL_LOADER_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/host_values.h"
#include "util/mapped_file.h"

namespace flover {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

absl::string_view DTypeName(DType dtype);

// Rows [row_begin, row_end) and columns [col_begin, col_end) of a tensor seen
// as a matrix: a 1-D tensor of n values is one row of n columns, and a
// higher-rank one is [shape[0], product of the rest].
struct TensorRegion {
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  int64_t rows() const { return row_end - row_begin; }
  int64_t cols() const { return col_end - col_begin; }
  int64_t numel() const { return rows() * cols(); }
};

struct TensorInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets into the data section
  int64_t end = 0;
  int64_t numel() const;
  // The whole tensor as a region.
  TensorRegion All() const;
};

// The dtype a backend knows a file's float dtype as: F16 and BF16 as
// themselves, anything else as kF32 (F32 itself; other dtypes are refused
// by the reads).
inline kernels::DType BackendDtype(DType dtype) {
  return dtype == DType::kF16    ? kernels::DType::kF16
         : dtype == DType::kBF16 ? kernels::DType::kBF16
                                 : kernels::DType::kF32;
}

// A float tensor's values (or a region's) as the file stores them: float32,
// or the 16-bit patterns of F16 / BF16, in their dtype until whoever uses
// them (a backend preparing a weight) widens or packs them.
struct StoredValues {
  kernels::DType dtype = kernels::DType::kF32;  // kF32, kF16 or kBF16
  std::vector<float> f32;                       // when kF32
  std::vector<uint16_t> bits;                   // when kF16 or kBF16
  // Or quantized blocks as a GGUF file stores them (--dtype=native): whole
  // rows, in runs of one format each; `block_values` values in all.
  std::vector<uint8_t> blocks;
  std::vector<kernels::BlockSpan> spans;
  int64_t block_values = 0;

  bool is_blocks() const { return !spans.empty(); }
  int64_t size() const {
    if (is_blocks()) return block_values;
    return static_cast<int64_t>(dtype == kernels::DType::kF32 ? f32.size() : bits.size());
  }
  bool empty() const { return size() == 0; }
  kernels::HostValues view() const {
    if (is_blocks()) {
      return kernels::HostValues(blocks.data(), spans.data(), static_cast<int>(spans.size()));
    }
    return dtype == kernels::DType::kF32 ? kernels::HostValues(f32.data())
                                         : kernels::HostValues(bits.data(), dtype);
  }
  std::vector<float> ToFloat() const { return kernels::WidenToF32(view(), size()); }
  // Frees the values (after they were handed to a backend).
  void Release() {
    std::vector<float>().swap(f32);
    std::vector<uint16_t>().swap(bits);
    std::vector<uint8_t>().swap(blocks);
    spans.clear();
    block_values = 0;
  }
};

class SafetensorsFile {
 public:
  // Maps the file and validates its header and offsets.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  // Validates `bytes` as a safetensors file; `name` is used in errors.
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes, std::string name);

  const std::string& name() const { return name_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* Find(absl::string_view tensor) const;

  // Converts a floating-point tensor (F32, F16, BF16) to float32.
  // `expected_shape` must equal the tensor's shape.
  absl::StatusOr<std::vector<float>> ReadFloat(
      absl::string_view tensor, const std::vector<int64_t>& expected_shape) const;
  // The same for a region of the tensor only (row-major, region.numel()
  // values); a region outside the tensor is an error.
  absl::StatusOr<std::vector<float>> ReadFloatRegion(absl::string_view tensor,
                                                     const std::vector<int64_t>& expected_shape,
                                                     const TensorRegion& region) const;
  // The region's values in the stored dtype (F32, F16 or BF16; others are
  // refused as ReadFloat refuses them).
  absl::StatusOr<StoredValues> ReadRegion(absl::string_view tensor,
                                          const std::vector<int64_t>& expected_shape,
                                          const TensorRegion& region) const;
  // The region of a U8 tensor as its bytes (gpt-oss's MXFP4 blocks and
  // scales); other dtypes are refused.
  absl::StatusOr<std::vector<uint8_t>> ReadBytesRegion(absl::string_view tensor,
                                                       const std::vector<int64_t>& expected_shape,
                                                       const TensorRegion& region) const;

 private:
  SafetensorsFile() = default;
  static absl::StatusOr<SafetensorsFile> ParseStorage(std::shared_ptr<const MappedFile> storage,
                                                      std::string name);
  // Where a checked region's rows are: row r of the tensor starts at
  // data + r * row_bytes; region rows start col_offset bytes into theirs.
  struct RegionSpan {
    DType dtype;
    int elem;  // bytes per value
    const char* data;
    int64_t row_bytes, col_offset;
    int64_t first_byte, end_byte;  // the span, from the file's data section start
  };
  // Checks the tensor (present, `expected_shape`, a float dtype) and that
  // `region` lies within it.
  // `bytes`: a U8 tensor, as ReadBytesRegion reads it (else F32, F16, BF16).
  absl::StatusOr<RegionSpan> Locate(absl::string_view tensor,
                                    const std::vector<int64_t>& expected_shape,
                                    const TensorRegion& region, bool bytes = false) const;
  // Drops the span's pages from this process's resident set.
  void Release(const RegionSpan& span) const;

  std::shared_ptr<const MappedFile> storage_;  // owned (Parse) or mapped (Open)
  std::string name_;
  int64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

// Half-precision conversions, exact (every F16/BF16 value is a float32).
using kernels::Bf16ToFloat;
using kernels::HalfToFloat;

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_SAFETENSORS_H_
