// Reader for GGUF files (versions 2 and 3), the format of llama.cpp, Ollama
// and LM Studio: a header, typed metadata (key -> value, arrays included),
// tensor descriptions, then the tensor data at an aligned offset. The file is
// untrusted input: every count, length and offset is checked against the
// file's size before it is used, and an error names the file, the byte
// offset and the field.
//
// The file is mapped, not read: ReadRows converts the blocks of the rows it
// is asked for to float32 and gives their pages back, RowBytes hands the
// rows over as stored (16-bit values, or blocks that --dtype=native keeps)
// and ReleaseRows gives their pages back after, so loading a model costs
// the weights being built plus one matrix, not the file.
#ifndef FLOVER_MODEL_LOADER_GGUF_H_
#define FLOVER_MODEL_LOADER_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/loader/gguf_quants.h"
#include "util/mapped_file.h"

namespace flover {

// Metadata value types (gguf_type).
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6,
  kBool = 7, kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
absl::string_view GgufTypeName(GgufType type);

// One metadata value. Integers (and booleans) are held as int64, floats as
// double; an array holds its elements in the vector for their kind.
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType element = GgufType::kU8;  // arrays: the elements' type
  int64_t integer = 0;
  double real = 0;
  std::string string;
  std::vector<int64_t> integers;     // arrays of integers or booleans
  std::vector<double> reals;         // arrays of floats
  std::vector<std::string> strings;  // arrays of strings
  std::vector<GgufValue> arrays;     // arrays of arrays

  bool is_integer() const;  // any integer type (not bool)
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  int64_t array_size() const;
};

struct GgufTensor {
  std::string name;
  const GgmlTypeInfo* type = nullptr;
  std::vector<int64_t> ne;  // as ggml: ne[0] varies fastest
  int64_t offset = 0;       // in the data section
  int64_t bytes = 0;

  // As PyTorch and safetensors write it: ne reversed ([rows, ..., ne[0]]).
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  int64_t cols() const { return ne[0]; }
  int64_t rows() const;  // every other dimension's product
  int64_t row_bytes() const { return cols() / type->block_size * type->type_size; }
};

class GgufFile {
 public:
  static absl::StatusOr<GgufFile> Open(const std::string& path);
  // `name` is used in errors.
  static absl::StatusOr<GgufFile> Parse(std::string bytes, std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  int64_t alignment() const { return alignment_; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* Find(absl::string_view key) const;
  // Typed metadata: NotFound when the key is absent, InvalidArgument naming
  // the key when its type differs (any integer type is an integer; a float
  // getter accepts integers too).
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  // The same, with `absent` for a key the file leaves out.
  absl::StatusOr<int64_t> GetIntOr(absl::string_view key, int64_t absent) const;
  absl::StatusOr<double> GetFloatOr(absl::string_view key, double absent) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<const std::vector<std::string>*> GetStrings(absl::string_view key) const;
  absl::StatusOr<const std::vector<int64_t>*> GetInts(absl::string_view key) const;
  absl::StatusOr<const std::vector<double>*> GetFloats(absl::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(absl::string_view name) const;

  // Rows [row_begin, row_end) of `tensor` seen as [rows(), cols()], as
  // float32; InvalidArgument for a type that does not dequantize, OutOfRange
  // for rows outside the tensor. The rows' pages are given back afterwards.
  absl::StatusOr<std::vector<float>> ReadRows(const GgufTensor& tensor, int64_t row_begin,
                                              int64_t row_end) const;
  // The raw bytes of those rows (F16/BF16 values as stored, say).
  absl::StatusOr<absl::string_view> RowBytes(const GgufTensor& tensor, int64_t row_begin,
                                             int64_t row_end) const;
  // Gives back the pages of those rows once their bytes were used.
  void ReleaseRows(const GgufTensor& tensor, int64_t row_begin, int64_t row_end) const;

 private:
  GgufFile() = default;
  static absl::StatusOr<GgufFile> ParseStorage(std::shared_ptr<const MappedFile> storage,
                                               std::string name);

  std::shared_ptr<const MappedFile> storage_;
  std::string name_;
  uint32_t version_ = 0;
  int64_t alignment_ = 32;
  int64_t data_start_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_GGUF_H_
