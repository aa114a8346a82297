#include "model/loader/safetensors.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/json.h"
#include "util/mapped_file.h"

namespace flover {
namespace {

// A header larger than this is refused before it is parsed.
constexpr uint64_t kMaxHeaderBytes = 100 << 20;
constexpr int kMaxRank = 8;

struct DTypeEntry {
  const char* name;
  DType dtype;
  int bytes;
};
constexpr DTypeEntry kDTypes[] = {
    {"F64", DType::kF64, 8}, {"F32", DType::kF32, 4}, {"F16", DType::kF16, 2},
    {"BF16", DType::kBF16, 2}, {"I64", DType::kI64, 8}, {"I32", DType::kI32, 4},
    {"I16", DType::kI16, 2}, {"I8", DType::kI8, 1}, {"U8", DType::kU8, 1},
    {"BOOL", DType::kBool, 1}};

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

uint16_t LoadU16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

absl::string_view DTypeName(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorRegion TensorInfo::All() const {
  const int64_t rows = shape.size() >= 2 ? shape[0] : 1;
  return TensorRegion{0, rows, 0, rows == 0 ? 0 : numel() / rows};
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  auto file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  return ParseStorage(std::move(*file), path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string bytes, std::string name) {
  return ParseStorage(MappedFile::FromBytes(std::move(bytes)), std::move(name));
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::ParseStorage(
    std::shared_ptr<const MappedFile> storage, std::string name) {
  const absl::string_view bytes = storage->bytes();
  auto err = [&name](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", parts...));
  };
  if (bytes.size() < 8) {
    return err("truncated file: ", bytes.size(), " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(bytes[i]);
  const uint64_t available = bytes.size() - 8;
  if (header_len > available) {
    return err("header length ", header_len, " runs past the end of the file (", available,
               " bytes follow the length field)");
  }
  if (header_len > kMaxHeaderBytes) {
    return err("header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes);
  }
  const int64_t data_start = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = static_cast<int64_t>(bytes.size()) - data_start;
  auto header = ParseJsonObject(bytes.substr(8, header_len), absl::StrCat(name, ": header"));
  if (!header.ok()) return header.status();

  SafetensorsFile file;
  file.name_ = name;
  file.data_start_ = data_start;
  for (const auto& field : header->fields()) {
    const std::string& key = field.first;  // (a lambda may not capture a structured binding in C++17)
    const google::protobuf::Value& value = field.second;
    if (key == "__metadata__") continue;
    auto terr = [&](auto&&... parts) { return err("tensor '", key, "': ", parts...); };
    if (value.kind_case() != google::protobuf::Value::kStructValue) {
      return terr("entry is not a JSON object");
    }
    const auto& f = value.struct_value().fields();
    TensorInfo info;

    auto dt = f.find("dtype");
    if (dt == f.end() || dt->second.kind_case() != google::protobuf::Value::kStringValue) {
      return terr("missing or non-string \"dtype\"");
    }
    const DTypeEntry* entry = nullptr;
    for (const auto& e : kDTypes) {
      if (dt->second.string_value() == e.name) entry = &e;
    }
    if (entry == nullptr) return terr("unknown dtype '", dt->second.string_value(), "'");
    info.dtype = entry->dtype;

    auto sh = f.find("shape");
    if (sh == f.end() || sh->second.kind_case() != google::protobuf::Value::kListValue) {
      return terr("missing or non-list \"shape\"");
    }
    if (sh->second.list_value().values_size() > kMaxRank) {
      return terr("rank ", sh->second.list_value().values_size(), " exceeds ", kMaxRank);
    }
    // Bound the element count as we go so the product cannot overflow.
    int64_t numel = 1;
    for (const auto& d : sh->second.list_value().values()) {
      auto dim = JsonToInt(d, "shape dimension", 0, int64_t{1} << 40);
      if (!dim.ok()) return terr(dim.status().message());
      info.shape.push_back(*dim);
      numel = *dim == 0 ? 0 : numel;
      if (numel != 0 && numel > (int64_t{1} << 45) / *dim) {
        return terr("shape ", ShapeString(info.shape), " is too large");
      }
      numel *= *dim;
    }

    auto off = f.find("data_offsets");
    if (off == f.end() || off->second.kind_case() != google::protobuf::Value::kListValue ||
        off->second.list_value().values_size() != 2) {
      return terr("\"data_offsets\" must be a list [begin, end]");
    }
    auto begin = JsonToInt(off->second.list_value().values(0), "data_offsets begin", 0, data_size);
    auto end = JsonToInt(off->second.list_value().values(1), "data_offsets end", 0, data_size);
    if (!begin.ok()) return terr(begin.status().message(), " (data section is ", data_size, " bytes)");
    if (!end.ok()) return terr(end.status().message(), " (data section is ", data_size, " bytes)");
    if (*end < *begin) return terr("data_offsets [", *begin, ", ", *end, "] end before they begin");
    info.begin = *begin;
    info.end = *end;
    const int64_t want = numel * entry->bytes;
    if (info.end - info.begin != want) {
      return terr("data_offsets [", info.begin, ", ", info.end, "] hold ", info.end - info.begin,
                  " bytes but shape ", ShapeString(info.shape), " of ", entry->name, " needs ",
                  want);
    }
    file.tensors_.emplace(key, std::move(info));
  }

  // No two tensors may share bytes.
  std::vector<std::pair<const std::string*, const TensorInfo*>> by_offset;
  for (const auto& [key, info] : file.tensors_) {
    if (info.end > info.begin) by_offset.push_back({&key, &info});
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i].second->begin < by_offset[i - 1].second->end) {
      return err("tensors '", *by_offset[i - 1].first, "' and '", *by_offset[i].first,
                 "' overlap in the data section");
    }
  }
  file.storage_ = std::move(storage);
  return file;
}

const TensorInfo* SafetensorsFile::Find(absl::string_view tensor) const {
  auto it = tensors_.find(std::string(tensor));
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadFloat(
    absl::string_view tensor, const std::vector<int64_t>& expected_shape) const {
  const TensorInfo* info = Find(tensor);
  return ReadFloatRegion(tensor, expected_shape, info != nullptr ? info->All() : TensorRegion{});
}

absl::StatusOr<SafetensorsFile::RegionSpan> SafetensorsFile::Locate(
    absl::string_view tensor, const std::vector<int64_t>& expected_shape,
    const TensorRegion& region, bool bytes) const {
  const TensorInfo* info = Find(tensor);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(name_, ": missing tensor '", tensor, "'"));
  }
  if (info->shape != expected_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": tensor '", tensor, "' has shape ", ShapeString(info->shape),
                     " but the config requires ", ShapeString(expected_shape)));
  }
  const TensorRegion all = info->All();
  if (region.row_begin < 0 || region.row_begin > region.row_end || region.row_end > all.row_end ||
      region.col_begin < 0 || region.col_begin > region.col_end || region.col_end > all.col_end) {
    return absl::OutOfRangeError(absl::StrCat(
        name_, ": tensor '", tensor, "': region rows [", region.row_begin, ", ", region.row_end,
        ") columns [", region.col_begin, ", ", region.col_end, ") is outside ",
        ShapeString(info->shape)));
  }
  int elem = 0;
  switch (info->dtype) {
    case DType::kF32: elem = bytes ? 0 : 4; break;
    case DType::kF16:
    case DType::kBF16: elem = bytes ? 0 : 2; break;
    case DType::kU8: elem = bytes ? 1 : 0; break;
    default: break;
  }
  if (elem == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": tensor '", tensor, "' has dtype ",
                                                   DTypeName(info->dtype),
                                                   bytes ? "; MXFP4 blocks and scales must be U8"
                                                         : "; weights must be F32, F16 or BF16"));
  }
  const int64_t cols = all.cols();
  const int64_t base = data_start_ + info->begin;
  RegionSpan span{info->dtype, elem, storage_->bytes().data() + base, cols * elem,
                  region.col_begin * elem, 0, 0};
  if (region.numel() > 0) {
    span.first_byte = base + (region.row_begin * cols + region.col_begin) * elem;
    span.end_byte = base + ((region.row_end - 1) * cols + region.col_end) * elem;
  }
  return span;
}

void SafetensorsFile::Release(const RegionSpan& span) const {
  if (span.end_byte > span.first_byte) storage_->Release(span.first_byte, span.end_byte);
}

absl::StatusOr<std::vector<uint8_t>> SafetensorsFile::ReadBytesRegion(
    absl::string_view tensor, const std::vector<int64_t>& expected_shape, const TensorRegion& region) const {
  auto span = Locate(tensor, expected_shape, region, /*bytes=*/true);
  if (!span.ok()) return span.status();
  std::vector<uint8_t> out(region.numel());
  if (region.numel() == 0) return out;
  for (int64_t r = region.row_begin; r < region.row_end; ++r) {
    std::memcpy(out.data() + (r - region.row_begin) * region.cols(),
                span->data + r * span->row_bytes + span->col_offset, region.cols());
  }
  Release(*span);
  return out;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadFloatRegion(
    absl::string_view tensor, const std::vector<int64_t>& expected_shape,
    const TensorRegion& region) const {
  auto span = Locate(tensor, expected_shape, region);
  if (!span.ok()) return span.status();
  const int64_t n = region.cols();
  std::vector<float> out(region.numel());
  // Nothing to read (a [5, 0] tensor, say): and no memcpy from or to the
  // null data of an empty vector (found by the fuzzer, under UBSan).
  if (region.numel() == 0) return out;
  for (int64_t r = region.row_begin; r < region.row_end; ++r) {
    const char* p = span->data + r * span->row_bytes + span->col_offset;
    float* o = out.data() + (r - region.row_begin) * n;
    switch (span->dtype) {
      case DType::kF32:
        std::memcpy(o, p, n * sizeof(float));
        break;
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) o[i] = HalfToFloat(LoadU16(p + 2 * i));
        break;
      default:
        for (int64_t i = 0; i < n; ++i) o[i] = Bf16ToFloat(LoadU16(p + 2 * i));
        break;
    }
  }
  Release(*span);
  return out;
}

absl::StatusOr<StoredValues> SafetensorsFile::ReadRegion(absl::string_view tensor,
                                                         const std::vector<int64_t>& expected_shape,
                                                         const TensorRegion& region) const {
  auto span = Locate(tensor, expected_shape, region);
  if (!span.ok()) return span.status();
  StoredValues v;
  v.dtype = BackendDtype(span->dtype);
  const int64_t n = region.cols();
  char* out;
  if (v.dtype == kernels::DType::kF32) {
    v.f32.resize(region.numel());
    out = reinterpret_cast<char*>(v.f32.data());
  } else {
    v.bits.resize(region.numel());
    out = reinterpret_cast<char*>(v.bits.data());
  }
  if (region.numel() == 0) return v;
  for (int64_t r = region.row_begin; r < region.row_end; ++r) {
    std::memcpy(out + (r - region.row_begin) * n * span->elem,
                span->data + r * span->row_bytes + span->col_offset, n * span->elem);
  }
  Release(*span);
  return v;
}

}  // namespace flover
