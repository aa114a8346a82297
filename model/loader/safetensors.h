// Reader for the safetensors format (8-byte little-endian header length, a
// JSON header, then raw tensor bytes). Every file is untrusted input: sizes,
// offsets, shapes and dtypes are all checked before any tensor is exposed, and
// every error names the file, the tensor and the problem.
#ifndef FLOVER_MODEL_LOADER_SAFETENSORS_H_
#define FLOVER_MODEL_LOADER_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flover {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

absl::string_view DTypeName(DType dtype);

struct TensorInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets into the data section
  int64_t end = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file.
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

 private:
  SafetensorsFile(std::string bytes, std::string name, int64_t data_start)
      : bytes_(std::move(bytes)), name_(std::move(name)), data_start_(data_start) {}

  std::string bytes_;
  std::string name_;
  int64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

// Half-precision conversions, exact (every F16/BF16 value is a float32).
float HalfToFloat(uint16_t h);
float BFloat16ToFloat(uint16_t b);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_SAFETENSORS_H_
