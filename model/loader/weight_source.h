// Where a model's weights come from, by their Hugging Face names, and how a
// tensor-parallel rank's parameters are cut from them.
//
// A family describes each parameter of a rank as a WeightRecipe: regions of
// checkpoint tensors, stacked as rows or placed side by side (Llama's fused
// q/k/v rows, GPT-2's Conv1D columns). ReadRecipe reads only those regions,
// so a rank converts its own slice of a file and nothing else. The same
// recipes serve checkpoints, GGUF files (model/llama/llama_gguf.h) and the
// built-in random models. A region comes out as float32 (Read: norms,
// biases), in the dtype it is stored in (ReadStored: a GEMM weight's F16 or
// BF16 values), or, for a tensor in quantized blocks, as whole rows of its
// blocks (ReadBlockRows) for backends that run them (--dtype=native).
#ifndef FLOVER_MODEL_LOADER_WEIGHT_SOURCE_H_
#define FLOVER_MODEL_LOADER_WEIGHT_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/block_format.h"
#include "model/loader/checkpoint.h"
#include "model/loader/safetensors.h"

namespace flover {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool Has(absl::string_view tensor) const = 0;
  // `region` of the tensor, whose shape must be `shape`, as float32.
  virtual absl::StatusOr<std::vector<float>> Read(absl::string_view tensor,
                                                  const std::vector<int64_t>& shape,
                                                  const TensorRegion& region) const = 0;
  // The same region in the dtype it is stored in (float32 unless the source
  // keeps F16 or BF16 values: a checkpoint).
  virtual absl::StatusOr<StoredValues> ReadStored(absl::string_view tensor,
                                                  const std::vector<int64_t>& shape,
                                                  const TensorRegion& region) const;
  // The dtype ReadStored gives for `tensor` (kF32 for an unknown one).
  virtual kernels::DType StoredDtypeOf(absl::string_view tensor) const {
    return kernels::DType::kF32;
  }
  // The weights' dtype where they are stored ("F32", "F16", "BF16").
  virtual std::string stored_dtype() const = 0;
  // Whether `tensor` is stored in quantized blocks a backend may take as
  // they are (kernels/block_format.h), and which; false by default.
  virtual bool BlockFormatOf(absl::string_view tensor, kernels::BlockFormat* format) const {
    return false;
  }
  // Rows [row_begin, row_end) of such a tensor, whole, as stored (in the
  // model's row order), whose shape must be `shape`.
  virtual absl::StatusOr<std::vector<uint8_t>> ReadBlockRows(absl::string_view tensor,
                                                             const std::vector<int64_t>& shape,
                                                             int64_t row_begin,
                                                             int64_t row_end) const;
  // `region` of a tensor of bytes (U8: a checkpoint's MXFP4 blocks and
  // scales) as they are; Unimplemented where the source has none.
  virtual absl::StatusOr<std::vector<uint8_t>> ReadBytes(absl::string_view tensor, const std::vector<int64_t>& shape,
                                                         const TensorRegion& region) const;
  // All rows of a tensor in blocks where the source holds them in memory it
  // maps (a GGUF file's), as they are, for a backend that reads them in place
  // (Backend::MapBlockRows): the first row's address, each next one
  // row_bytes on; `owner` keeps the mapping alive. Unimplemented where the
  // source has no such memory or the rows are not the tensor's own (an
  // expert's, permuted, a type run as another).
  struct MappedRows {
    const uint8_t* data = nullptr;
    int64_t rows = 0, row_bytes = 0;
    kernels::BlockFormat format = kernels::BlockFormat::kQ8_0;
    std::shared_ptr<const void> owner;
  };
  virtual absl::StatusOr<MappedRows> MapBlockRows(absl::string_view tensor, const std::vector<int64_t>& shape) const;
};

// A checkpoint directory. `alias_prefix`: a tensor missing under its name is
// looked up under prefix + name too (GPT-2 saved with "transformer.").
class CheckpointSource final : public WeightSource {
 public:
  CheckpointSource(Checkpoint checkpoint, std::string alias_prefix, std::string stored_dtype)
      : checkpoint_(std::move(checkpoint)),
        prefix_(std::move(alias_prefix)),
        stored_dtype_(std::move(stored_dtype)) {}
  bool Has(absl::string_view tensor) const override;
  absl::StatusOr<std::vector<float>> Read(absl::string_view tensor,
                                          const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override;
  absl::StatusOr<StoredValues> ReadStored(absl::string_view tensor,
                                          const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override;
  kernels::DType StoredDtypeOf(absl::string_view tensor) const override;
  std::string stored_dtype() const override { return stored_dtype_; }
  absl::StatusOr<std::vector<uint8_t>> ReadBytes(absl::string_view tensor, const std::vector<int64_t>& shape,
                                                 const TensorRegion& region) const override;

 private:
  std::string Resolve(absl::string_view tensor) const;
  Checkpoint checkpoint_;
  std::string prefix_, stored_dtype_;
};

// Another source under other names: `rename` maps the name a family asks
// for to the one the source holds (LFM2's and Qwen3.5's image-text
// checkpoints name the Llama layout's tensors their own way).
class RenamedSource final : public WeightSource {
 public:
  using Rename = std::function<std::string(absl::string_view)>;
  RenamedSource(std::unique_ptr<WeightSource> inner, Rename rename)
      : inner_(std::move(inner)), rename_(std::move(rename)) {}
  bool Has(absl::string_view tensor) const override { return inner_->Has(rename_(tensor)); }
  absl::StatusOr<std::vector<float>> Read(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override {
    return inner_->Read(rename_(tensor), shape, region);
  }
  absl::StatusOr<StoredValues> ReadStored(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override {
    return inner_->ReadStored(rename_(tensor), shape, region);
  }
  kernels::DType StoredDtypeOf(absl::string_view tensor) const override {
    return inner_->StoredDtypeOf(rename_(tensor));
  }
  std::string stored_dtype() const override { return inner_->stored_dtype(); }
  bool BlockFormatOf(absl::string_view tensor, kernels::BlockFormat* format) const override {
    return inner_->BlockFormatOf(rename_(tensor), format);
  }
  absl::StatusOr<std::vector<uint8_t>> ReadBlockRows(absl::string_view tensor, const std::vector<int64_t>& shape,
                                                     int64_t row_begin, int64_t row_end) const override {
    return inner_->ReadBlockRows(rename_(tensor), shape, row_begin, row_end);
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  Rename rename_;
};

// Another source where some tensors are rows of a larger one: `locate`
// says, for a name the family asks for, which rows of which matrix hold it
// (false: the name as it is in `inner`). A fused [gate | up] matrix's half,
// or one expert of a 3-D tensor of experts (Qwen3.5-MoE's gate_up_proj
// [E, 2F, C], Granite's input_linear), read as its own [rows, C] matrix.
class SlicedSource final : public WeightSource {
 public:
  struct Slice {
    std::string tensor;          // the tensor in `inner`
    std::vector<int64_t> shape;  // its shape: [R, C], or [E, R, C]
    int64_t index = -1;          // the matrix of a 3-D tensor; -1: 2-D
    int64_t row_begin = 0, rows = 0;
  };
  using Locate = std::function<bool(absl::string_view, Slice*)>;
  SlicedSource(std::unique_ptr<WeightSource> inner, Locate locate)
      : inner_(std::move(inner)), locate_(std::move(locate)) {}
  bool Has(absl::string_view tensor) const override;
  absl::StatusOr<std::vector<float>> Read(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override;
  absl::StatusOr<StoredValues> ReadStored(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override;
  kernels::DType StoredDtypeOf(absl::string_view tensor) const override;
  std::string stored_dtype() const override { return inner_->stored_dtype(); }

 private:
  // The regions of the slice's tensor that hold `region` of the slice, in
  // order (one when whole rows are asked for), or an error naming the
  // shapes when `shape` is not the slice's.
  absl::StatusOr<std::vector<TensorRegion>> Regions(absl::string_view tensor, const Slice& s,
                                                    const std::vector<int64_t>& shape,
                                                    const TensorRegion& region) const;
  std::unique_ptr<WeightSource> inner_;
  Locate locate_;
};

// Seeded random weights for the built-in models, the same for the same seed
// whatever region is read: element i of tensor t is a pure function of
// (seed, t, i). `kind` says which tensors exist and how they are filled.
// kBlocks tensors (2-D, [N, K]) are random rows of quantized blocks in
// `blocks` (model/loader/random_blocks.h; row r a pure function of (seed, t,
// r)), taken as they are by native backends and dequantized by Read; kRandom
// ones where no block format is given or the rows are not whole blocks.
class GeneratedSource final : public WeightSource {
 public:
  enum class Fill { kAbsent, kRandom, kOnes, kZeros, kBlocks };
  GeneratedSource(uint64_t seed, std::function<Fill(absl::string_view)> kind,
                  std::optional<kernels::BlockFormat> blocks = std::nullopt)
      : seed_(seed), kind_(std::move(kind)), blocks_(blocks) {}
  bool Has(absl::string_view tensor) const override { return kind_(tensor) != Fill::kAbsent; }
  absl::StatusOr<std::vector<float>> Read(absl::string_view tensor,
                                          const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override;
  std::string stored_dtype() const override;
  bool BlockFormatOf(absl::string_view tensor, kernels::BlockFormat* format) const override;
  absl::StatusOr<std::vector<uint8_t>> ReadBlockRows(absl::string_view tensor,
                                                     const std::vector<int64_t>& shape,
                                                     int64_t row_begin,
                                                     int64_t row_end) const override;

 private:
  Fill FillOf(absl::string_view tensor) const;

  uint64_t seed_;
  std::function<Fill(absl::string_view)> kind_;
  std::optional<kernels::BlockFormat> blocks_;
};

// A region of one tensor.
struct WeightBlock {
  std::string tensor;
  std::vector<int64_t> shape;  // the whole tensor's, as the config requires it
  TensorRegion region;
};

// One parameter of a rank: its blocks stacked as rows (kRows: each block is
// whole rows of the result) or placed side by side (kCols: each block is a
// band of columns, all with the same number of rows).
struct WeightRecipe {
  enum Axis { kRows, kCols } axis = kRows;
  std::vector<WeightBlock> blocks;
  int64_t zeros = 0;  // no blocks: this many zeros (a bias another rank adds)
  // Added to every value read, in float32 (Gemma's (1 + w) norm weights),
  // then the sum times `scale` (Granite's logits divided by logits_scaling,
  // folded into the final norm's weights).
  float offset = 0.0f;
  float scale = 1.0f;
  bool exact() const { return offset == 0.0f && scale == 1.0f; }
};

// A whole tensor, or rows / columns [begin, end) of it (a 1-D tensor's
// columns are its elements).
WeightRecipe Whole(std::string tensor, std::vector<int64_t> shape);
WeightRecipe RowSlice(std::string tensor, std::vector<int64_t> shape, int64_t begin, int64_t end);
WeightRecipe ColSlice(std::string tensor, std::vector<int64_t> shape, int64_t begin, int64_t end);
// `n` zeros, read from nowhere.
WeightRecipe Zeros(int64_t n);
// The recipe's values plus one: a norm weight stored as w for a (1 + w)
// scale (Gemma), folded in as it is read.
WeightRecipe PlusOne(WeightRecipe recipe);
// The recipe's values times `scale`, in float32 as they are read.
WeightRecipe Scaled(WeightRecipe recipe, float scale);
// Several recipes' single blocks combined along `axis`.
WeightRecipe Stack(WeightRecipe::Axis axis, std::vector<WeightRecipe> parts);

absl::StatusOr<std::vector<float>> ReadRecipe(const WeightSource& source,
                                              const WeightRecipe& recipe);
// The same in the stored dtype when every block has the same one (float32
// when they differ, or for zeros): a GEMM weight the backend takes as it is.
// With `keep_blocks`, a recipe of rows of block-quantized tensors
// (kernels/block_format.h) whose row length a backend's block kernels take
// (BlockRowsFit) comes as those blocks: rows stacked, runs of one format;
// so does a slice of their columns that starts at a block (a row-split
// layer's share under tensor parallelism), each row its blocks there.
absl::StatusOr<StoredValues> ReadRecipeStored(const WeightSource& source,
                                              const WeightRecipe& recipe, bool keep_blocks = false);

// Where a recipe's values go: float32 (norms, biases, embeddings: ops take
// them so) or the stored dtype (GEMM weights, which a backend prepares).
struct ParamDest {
  std::vector<float>* f32 = nullptr;
  StoredValues* stored = nullptr;
  ParamDest() = default;
  ParamDest(std::vector<float>* to) : f32(to) {}   // NOLINT: implicit on purpose
  ParamDest(StoredValues* to) : stored(to) {}      // NOLINT
};
// Reads `recipe` into `dest` (nothing when dest is empty); `keep_blocks` as
// for ReadRecipeStored.
absl::Status ReadInto(const WeightSource& source, const WeightRecipe& recipe, ParamDest dest,
                      bool keep_blocks = false);

// Which part of a model's weights to read: layers [layer_begin, layer_end)
// and, with `globals`, the parameters outside the layers (embeddings, final
// norm, head). The default is everything; models are put on a backend one
// layer at a time, so the host holds one layer's float32 copy at once.
struct WeightPart {
  int layer_begin = 0, layer_end = -1;  // -1: through the last layer
  bool globals = true;
  // With `globals`: the embedding too. Models put it on their backend a
  // block of rows at a time themselves (UploadRowsF32), so leave it out.
  bool embedding = true;
  // GEMM weights stored in quantized blocks come as those blocks where they
  // can (ReadRecipeStored): for a backend run with --dtype=native.
  bool keep_blocks = false;
};

// InvalidArgument unless `part` lies within `n_layer` layers.
absl::Status CheckWeightPart(const WeightPart& part, int n_layer);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_WEIGHT_SOURCE_H_
