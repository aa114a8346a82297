#include "model/loader/gguf_source.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/ggml_dequant.h"

namespace flover {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

class GgufSource final : public WeightSource {
 public:
  GgufSource(std::shared_ptr<const GgufFile> file, GgufNaming naming)
      : file_(std::move(file)), naming_(std::move(naming)) {}

  bool Has(absl::string_view tensor) const override { return Find(tensor) != nullptr; }

  absl::StatusOr<std::vector<float>> Read(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override {
    std::vector<float> out;
    auto st = Gather<float>(tensor, shape, region, &out,
                            [&](const GgufTensor& t, int64_t r0, int64_t r1) {
                              return file_->ReadRows(t, r0, r1);
                            });
    if (!st.ok()) return st;
    return out;
  }

  absl::StatusOr<StoredValues> ReadStored(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override {
    StoredValues v;
    v.dtype = StoredDtypeOf(tensor);
    if (v.dtype == kernels::DType::kF32) {
      auto values = Read(tensor, shape, region);
      if (!values.ok()) return values.status();
      v.f32 = std::move(*values);
      return v;
    }
    // F16 / BF16: the 16-bit values as stored.
    auto st = Gather<uint16_t>(
        tensor, shape, region, &v.bits,
        [&](const GgufTensor& t, int64_t r0, int64_t r1) -> absl::StatusOr<std::vector<uint16_t>> {
          auto bytes = file_->RowBytes(t, r0, r1);
          if (!bytes.ok()) return bytes.status();
          std::vector<uint16_t> bits(bytes->size() / 2);
          std::memcpy(bits.data(), bytes->data(), bytes->size());
          file_->ReleaseRows(t, r0, r1);
          return bits;
        });
    if (!st.ok()) return st;
    return v;
  }

  kernels::DType StoredDtypeOf(absl::string_view tensor) const override {
    const GgufTensor* t = Find(tensor);
    if (t == nullptr) return kernels::DType::kF32;
    if (t->type->id == static_cast<uint32_t>(GgmlType::kF16)) return kernels::DType::kF16;
    if (t->type->id == static_cast<uint32_t>(GgmlType::kBF16)) return kernels::DType::kBF16;
    return kernels::DType::kF32;  // quantized types are dequantized to float32
  }

  std::string stored_dtype() const override { return GgufStoredType(*file_); }

  bool BlockFormatOf(absl::string_view tensor, kernels::BlockFormat* format) const override {
    const View v = Resolve(tensor);
    return v.t != nullptr && v.shape.size() == 2 && GgufRowsFormat(v.t->type->id, format);
  }

  // Whole rows as stored (Q3_K's and IQ4_NL's as their stand-ins' blocks of
  // the same values, kernels::GgmlStandInFor): a
  // permuted tensor's rows put back in transformers' order (a row is its
  // own blocks, so rows move whole), read a run at a time: all of them, or
  // a head's when permuted.
  absl::StatusOr<MappedRows> MapBlockRows(absl::string_view tensor, const std::vector<int64_t>& shape) const override {
    const TensorRegion region{0, shape.size() == 2 ? shape[0] : 0, 0, shape.size() == 2 ? shape[1] : 0};
    auto located = Locate(tensor, shape, region);
    if (!located.ok()) return located.status();
    const GgufTensor& t = *located->t;
    MappedRows out;
    if (shape.size() != 2 || located->row0 != 0 || located->flat || located->shape != t.shape() ||
        naming_.permuted_heads.count(t.name) > 0 || kernels::GgmlStandInFor(t.type->id) != nullptr ||
        !GgufRowsFormat(t.type->id, &out.format)) {
      return absl::UnimplementedError(absl::StrCat("'", tensor, "' is not mapped as its own blocks"));
    }
    auto bytes = file_->RowBytes(t, 0, t.rows());
    if (!bytes.ok()) return bytes.status();
    out.data = reinterpret_cast<const uint8_t*>(bytes->data());
    out.rows = t.rows();
    out.row_bytes = t.row_bytes();
    out.owner = file_;
    return out;
  }

  absl::StatusOr<std::vector<uint8_t>> ReadBlockRows(absl::string_view tensor,
                                                     const std::vector<int64_t>& shape,
                                                     int64_t row_begin, int64_t row_end) const override {
    const TensorRegion region{row_begin, row_end, 0, shape.size() == 2 ? shape[1] : 0};
    auto located = Locate(tensor, shape, region);
    if (!located.ok()) return located.status();
    const GgufTensor& t = *located->t;
    auto it = naming_.permuted_heads.find(t.name);
    const int64_t D = it == naming_.permuted_heads.end() ? 0 : t.rows() / it->second;
    std::vector<uint8_t> out;
    if (region.rows() == 0) return out;
    // A type run as another (Q3_K as Q6_K, IQ4_NL as Q8_0): each row's
    // blocks rewritten, as many, in the other's bytes.
    const kernels::GgmlStandIn* stand_in = kernels::GgmlStandInFor(t.type->id);
    const int64_t row_blocks = t.cols() / t.type->block_size;
    const int64_t stand_in_bytes =
        stand_in == nullptr ? 0 : row_blocks * GgmlTypeOf(static_cast<uint32_t>(stand_in->as))->type_size;
    // An expert's matrix: its rows of the merged tensor.
    row_begin += located->row0;
    row_end += located->row0;
    const int64_t run = D == 0 ? region.rows() : D;
    for (int64_t b0 = D == 0 ? row_begin : row_begin / D * D; b0 < row_end; b0 += run) {
      const int64_t b1 = std::min(b0 + run, t.rows());
      auto bytes = file_->RowBytes(t, b0, b1);
      if (!bytes.ok()) return bytes.status();
      const int64_t row_bytes = static_cast<int64_t>(bytes->size()) / (b1 - b0);
      for (int64_t r = std::max(b0, row_begin); r < std::min(b1, row_end); ++r) {
        const char* row = bytes->data() + ((D == 0 ? r : Unpermute(r, D)) - b0) * row_bytes;
        if (stand_in != nullptr) {
          const size_t at = out.size();
          out.resize(at + stand_in_bytes);
          stand_in->rewrite(reinterpret_cast<const uint8_t*>(row), row_blocks, out.data() + at);
        } else {
          out.insert(out.end(), row, row + row_bytes);
        }
      }
      file_->ReleaseRows(t, b0, b1);
    }
    return out;
  }

 private:
  // What a transformers name is in the file: a tensor, or an expert's
  // matrix within a merged 3-D tensor (rows [row0, row0 + shape[0]) of it
  // seen as [rows(), cols()]).
  struct View {
    const GgufTensor* t = nullptr;
    std::string name;  // the GGUF name ("" when there is none)
    int64_t row0 = 0;
    std::vector<int64_t> shape;
    int missing_expert = -1;  // the tensor is there, but not with this expert
    bool flat = false;        // read as one row of all its values (GgufNaming::flat)
  };
  View Resolve(absl::string_view hf) const {
    View v;
    int expert = -1;
    v.name = naming_.name(hf, &expert);
    v.t = v.name.empty() ? nullptr : file_->FindTensor(v.name);
    if (v.t == nullptr) return v;
    v.shape = v.t->shape();
    // A vector llama.cpp stores for a one-row matrix of transformers'.
    if (v.shape.size() == 2) {
      for (const std::string& suffix : naming_.middle_one) {
        if (absl::EndsWith(v.name, suffix)) v.shape = {v.shape[0], 1, v.shape[1]};
      }
    }
    for (const std::string& suffix : naming_.flat) {
      if (absl::EndsWith(v.name, suffix) && v.shape.size() > 1) {
        v.flat = true;
        v.shape = {v.t->rows() * v.t->cols()};
      }
    }
    if (v.shape.size() == 1) {
      for (const std::string& suffix : naming_.one_row) {
        if (absl::EndsWith(v.name, suffix)) v.shape = {1, v.shape[0]};
      }
    }
    if (expert < 0) return v;
    if (v.shape.size() != 3 || expert >= v.shape[0]) {
      v.missing_expert = expert;  // not a layer's merged experts, or not this many
      return v;
    }
    v.row0 = expert * v.shape[1];
    v.shape = {v.shape[1], v.shape[2]};
    if (const int half = naming_.half ? naming_.half(hf) : -1; half >= 0 && v.shape[0] % 2 == 0) {
      v.shape[0] /= 2;
      v.row0 += half * v.shape[0];
    }
    return v;
  }
  const GgufTensor* Find(absl::string_view hf) const {
    const View v = Resolve(hf);
    return v.missing_expert >= 0 ? nullptr : v.t;
  }

  // Tensor `hf`, checked to have `shape` and to hold `region`.
  absl::StatusOr<View> Locate(absl::string_view hf, const std::vector<int64_t>& shape,
                              const TensorRegion& region) const {
    View v = Resolve(hf);
    const std::string& name = v.name;
    if (v.t == nullptr) {
      return absl::NotFoundError(absl::StrCat(file_->name(), ": no tensor '",
                                              name.empty() ? std::string(hf) : name, "' (", hf, ")"));
    }
    if (v.missing_expert >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_->name(), ": tensor '", name, "' has shape ", ShapeString(v.shape), ", which holds no expert ",
          v.missing_expert, " (the experts of a layer, [experts, rows, cols]; expert_count says more)"));
    }
    if (v.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_->name(), ": tensor '", name, "'", v.row0 > 0 || v.shape.size() < v.t->shape().size() ? " (an expert's part)" : "",
          " has shape ", ShapeString(v.shape), "; the model's hyper-parameters need ", ShapeString(shape)));
    }
    const int64_t rows = v.shape.size() == 1 ? 1 : v.shape[0], cols = v.flat ? v.shape[0] : v.t->cols();
    if (region.row_begin < 0 || region.row_end > (v.shape.size() == 2 ? rows : v.t->rows()) ||
        region.row_begin > region.row_end || region.col_begin < 0 || region.col_end > cols ||
        region.col_begin > region.col_end) {
      return absl::OutOfRangeError(absl::StrCat(file_->name(), ": tensor '", name,
                                                "': region outside the tensor"));
    }
    return v;
  }

  // Within each head of D rows (or bias elements), transformers' index
  // j * D/2 + i is llama.cpp's 2 i + j.
  static int64_t Unpermute(int64_t k, int64_t D) {
    const int64_t head = k / D, j = (k % D) / (D / 2), i = k % (D / 2);
    return head * D + 2 * i + j;
  }

  // `region` of tensor `hf` (whose shape must be `shape`) into `out`, its
  // file rows read a run at a time by `read` (rows [r0, r1) -> values), the
  // rows of a permuted tensor put back in transformers' order.
  template <typename T, typename ReadRows>
  absl::Status Gather(absl::string_view hf, const std::vector<int64_t>& shape,
                      const TensorRegion& region, std::vector<T>* out, const ReadRows& read) const {
    auto located = Locate(hf, shape, region);
    if (!located.ok()) return located.status();
    const GgufTensor* t = located->t;
    const std::string& name = t->name;
    const int64_t rows = t->rows(), cols = t->cols();
    out->clear();
    if (region.numel() == 0) return absl::OkStatus();
    out->reserve(region.numel());
    if (located->flat) {  // every row of the file's, as one
      auto values = read(*t, 0, rows);
      if (!values.ok()) return values.status();
      out->insert(out->end(), values->begin() + region.col_begin, values->begin() + region.col_end);
      return absl::OkStatus();
    }
    auto it = naming_.permuted_heads.find(name);
    if (it == naming_.permuted_heads.end()) {  // the file's layout is transformers' (an expert's: its rows)
      auto values = read(*t, located->row0 + region.row_begin, located->row0 + region.row_end);
      if (!values.ok()) return values.status();
      for (int64_t r = 0; r < region.rows(); ++r) {
        const T* row = values->data() + r * cols;
        out->insert(out->end(), row + region.col_begin, row + region.col_end);
      }
      return absl::OkStatus();
    }
    // Rows of a matrix, elements of a bias.
    const int64_t D = (t->ne.size() == 1 ? cols : rows) / it->second;
    auto unpermute = [D](int64_t k) { return Unpermute(k, D); };
    if (t->ne.size() == 1) {
      auto values = read(*t, 0, 1);
      if (!values.ok()) return values.status();
      for (int64_t c = region.col_begin; c < region.col_end; ++c) out->push_back((*values)[unpermute(c)]);
      return absl::OkStatus();
    }
    // A head's rows are read whole, then picked.
    for (int64_t b0 = region.row_begin / D * D; b0 < region.row_end; b0 += D) {
      auto values = read(*t, b0, b0 + D);
      if (!values.ok()) return values.status();
      for (int64_t r = std::max(b0, region.row_begin); r < std::min(b0 + D, region.row_end); ++r) {
        const T* row = values->data() + (unpermute(r) - b0) * cols;
        out->insert(out->end(), row + region.col_begin, row + region.col_end);
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const GgufFile> file_;
  GgufNaming naming_;
};

}  // namespace

bool GgufRowsFormat(uint32_t type, kernels::BlockFormat* format) {
  if (const kernels::GgmlStandIn* s = kernels::GgmlStandInFor(type)) type = static_cast<uint32_t>(s->as);
  return kernels::BlockFormatOfGgmlType(type, format);
}

std::string GgufStoredType(const GgufFile& file) {
  std::map<std::string, int> count;
  for (const GgufTensor& t : file.tensors()) {
    if (t.ne.size() >= 2) ++count[t.type->name];
  }
  std::string best = "F32";
  int most = 0;
  for (const auto& [name, n] : count) {
    if (n > most) best = name, most = n;
  }
  return best;
}

std::unique_ptr<WeightSource> GgufWeightSource(std::shared_ptr<const GgufFile> file, GgufNaming naming) {
  return std::make_unique<GgufSource>(std::move(file), std::move(naming));
}

}  // namespace flover
