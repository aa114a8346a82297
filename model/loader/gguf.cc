#include "model/loader/gguf.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace flover {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF", little-endian
constexpr int kMaxArrayDepth = 4;        // arrays of arrays of ...
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr uint64_t kMaxKeyBytes = 65535;
constexpr uint64_t kMaxTensorNameBytes = 256;
constexpr int64_t kMaxElements = int64_t{1} << 50;
// Elements of one metadata array: real vocabularies are ~256k tokens. Each
// becomes an 8-byte integer or a string here, so a bound keeps a small file
// from asking for many times its size.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;

// The smallest encoding of one value of each type, to bound counts by the
// bytes left before anything is allocated for them.
int64_t MinBytes(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: case GgufType::kString: return 8;
    case GgufType::kArray: return 12;  // element type + count
  }
  return 1;
}

bool Known(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

// A cursor over the file's bytes; every read checks the bytes are there.
class Reader {
 public:
  Reader(absl::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  int64_t pos() const { return pos_; }
  int64_t left() const { return static_cast<int64_t>(bytes_.size()) - pos_; }

  template <typename... Parts>
  absl::Status Error(int64_t at, const Parts&... parts) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": at byte ", at, ": ", parts...));
  }

  template <typename T>
  absl::Status Get(T* out, absl::string_view what) {
    if (left() < static_cast<int64_t>(sizeof(T))) {
      return Error(pos_, what, ": the file ends (", bytes_.size(), " bytes) before its ",
                   sizeof(T), " bytes");
    }
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status String(std::string* out, uint64_t max, absl::string_view what) {
    const int64_t at = pos_;
    uint64_t n = 0;
    if (absl::Status st = Get(&n, what); !st.ok()) return st;
    if (n > max) return Error(at, what, ": a string of ", n, " bytes (at most ", max, ")");
    if (n > static_cast<uint64_t>(left())) {
      return Error(at, what, ": a string of ", n, " bytes runs past the end of the file (",
                   left(), " bytes left)");
    }
    out->assign(bytes_.data() + pos_, n);
    pos_ += static_cast<int64_t>(n);
    return absl::OkStatus();
  }

 private:
  absl::string_view bytes_;
  const std::string& name_;
  int64_t pos_ = 0;
};

absl::Status ReadValue(Reader& r, GgufType type, int depth, const std::string& what,
                       GgufValue* out);

template <typename T>
absl::Status ReadInt(Reader& r, const std::string& what, int64_t* out) {
  T v;
  if (absl::Status st = r.Get(&v, what); !st.ok()) return st;
  if constexpr (std::is_same_v<T, uint64_t>) {
    if (v > static_cast<uint64_t>(INT64_MAX)) {
      return r.Error(r.pos() - 8, what, ": ", v, " is larger than this reader takes (2^63 - 1)");
    }
  }
  *out = static_cast<int64_t>(v);
  return absl::OkStatus();
}

// An integer or boolean of type `t` (not an array or string or float).
absl::Status ReadIntOf(Reader& r, GgufType t, const std::string& what, int64_t* out) {
  switch (t) {
    case GgufType::kU8: return ReadInt<uint8_t>(r, what, out);
    case GgufType::kI8: return ReadInt<int8_t>(r, what, out);
    case GgufType::kU16: return ReadInt<uint16_t>(r, what, out);
    case GgufType::kI16: return ReadInt<int16_t>(r, what, out);
    case GgufType::kU32: return ReadInt<uint32_t>(r, what, out);
    case GgufType::kI32: return ReadInt<int32_t>(r, what, out);
    case GgufType::kU64: return ReadInt<uint64_t>(r, what, out);
    case GgufType::kI64: return ReadInt<int64_t>(r, what, out);
    case GgufType::kBool: {
      const int64_t at = r.pos();
      if (absl::Status st = ReadInt<uint8_t>(r, what, out); !st.ok()) return st;
      if (*out > 1) return r.Error(at, what, ": a bool must be 0 or 1, got ", *out);
      return absl::OkStatus();
    }
    default: return absl::InternalError("not an integer type");
  }
}

absl::Status ReadReal(Reader& r, GgufType t, const std::string& what, double* out) {
  if (t == GgufType::kF32) {
    float f;
    if (absl::Status st = r.Get(&f, what); !st.ok()) return st;
    *out = f;
    return absl::OkStatus();
  }
  return r.Get(out, what);
}

absl::Status ReadArray(Reader& r, int depth, const std::string& what, GgufValue* out) {
  const int64_t at = r.pos();
  uint32_t element = 0;
  uint64_t count = 0;
  if (absl::Status st = r.Get(&element, what + " array type"); !st.ok()) return st;
  if (!Known(element)) return r.Error(at, what, ": unknown array element type ", element);
  if (absl::Status st = r.Get(&count, what + " array length"); !st.ok()) return st;
  out->element = static_cast<GgufType>(element);
  if (out->element == GgufType::kArray && depth >= kMaxArrayDepth) {
    return r.Error(at, what, ": arrays nested deeper than ", kMaxArrayDepth);
  }
  if (count > kMaxArrayElements) {
    return r.Error(at, what, ": an array of ", count, " elements (at most ", kMaxArrayElements, ")");
  }
  const int64_t min = MinBytes(out->element);
  if (count > static_cast<uint64_t>(r.left() / min)) {
    return r.Error(at, what, ": an array of ", count, " ", GgufTypeName(out->element),
                   " values cannot fit in the ", r.left(), " bytes left");
  }
  const int64_t n = static_cast<int64_t>(count);
  for (int64_t i = 0; i < n; ++i) {
    const std::string item = absl::StrCat(what, "[", i, "]");
    switch (out->element) {
      case GgufType::kString: {
        std::string s;
        if (absl::Status st = r.String(&s, UINT64_MAX, item); !st.ok()) return st;
        out->strings.push_back(std::move(s));
        break;
      }
      case GgufType::kF32:
      case GgufType::kF64: {
        double v;
        if (absl::Status st = ReadReal(r, out->element, item, &v); !st.ok()) return st;
        out->reals.push_back(v);
        break;
      }
      case GgufType::kArray: {
        GgufValue v;
        if (absl::Status st = ReadValue(r, GgufType::kArray, depth + 1, item, &v); !st.ok()) {
          return st;
        }
        out->arrays.push_back(std::move(v));
        break;
      }
      default: {
        int64_t v;
        if (absl::Status st = ReadIntOf(r, out->element, item, &v); !st.ok()) return st;
        out->integers.push_back(v);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReadValue(Reader& r, GgufType type, int depth, const std::string& what,
                       GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufType::kString: return r.String(&out->string, UINT64_MAX, what);
    case GgufType::kF32:
    case GgufType::kF64: return ReadReal(r, type, what, &out->real);
    case GgufType::kArray: return ReadArray(r, depth, what, out);
    default: return ReadIntOf(r, type, what, &out->integer);
  }
}

}  // namespace

absl::string_view GgufTypeName(GgufType type) {
  static constexpr const char* kNames[] = {"u8",  "i8",  "u16",  "i16",   "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  const uint32_t t = static_cast<uint32_t>(type);
  return t < sizeof(kNames) / sizeof(kNames[0]) ? kNames[t] : "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16:
    case GgufType::kU32: case GgufType::kI32: case GgufType::kU64: case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

int64_t GgufValue::array_size() const {
  return static_cast<int64_t>(integers.size() + reals.size() + strings.size() + arrays.size());
}

int64_t GgufTensor::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  auto file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  return ParseStorage(std::move(*file), path);
}

absl::StatusOr<GgufFile> GgufFile::Parse(std::string bytes, std::string name) {
  return ParseStorage(MappedFile::FromBytes(std::move(bytes)), std::move(name));
}

absl::StatusOr<GgufFile> GgufFile::ParseStorage(std::shared_ptr<const MappedFile> storage,
                                                std::string name) {
  GgufFile f;
  f.name_ = std::move(name);
  Reader r(storage->bytes(), f.name_);
  uint32_t magic = 0;
  if (absl::Status st = r.Get(&magic, "magic"); !st.ok()) return st;
  if (magic != kMagic) return r.Error(0, "not a GGUF file (its first 4 bytes are not \"GGUF\")");
  if (absl::Status st = r.Get(&f.version_, "version"); !st.ok()) return st;
  if (f.version_ != 2 && f.version_ != 3) {
    const bool swapped = f.version_ > 0xFFFF && (f.version_ & 0xFFFF) == 0;
    return r.Error(4, "GGUF version ", f.version_, " is not supported (2 and 3 are)",
                   swapped ? "; the file looks big-endian" : "");
  }
  uint64_t tensor_count = 0, kv_count = 0;
  if (absl::Status st = r.Get(&tensor_count, "tensor count"); !st.ok()) return st;
  if (absl::Status st = r.Get(&kv_count, "metadata count"); !st.ok()) return st;
  // A key-value pair takes at least 8 + 4 + 1 bytes, a tensor description 24.
  if (kv_count > static_cast<uint64_t>(r.left() / 13)) {
    return r.Error(16, "metadata count ", kv_count, " cannot fit in the file");
  }
  if (tensor_count > static_cast<uint64_t>(r.left() / 24)) {
    return r.Error(8, "tensor count ", tensor_count, " cannot fit in the file");
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    const int64_t at = r.pos();
    std::string key;
    if (absl::Status st = r.String(&key, kMaxKeyBytes, absl::StrCat("metadata key ", i)); !st.ok()) {
      return st;
    }
    if (key.empty()) return r.Error(at, "metadata key ", i, " is empty");
    uint32_t type = 0;
    const int64_t type_at = r.pos();
    if (absl::Status st = r.Get(&type, absl::StrCat(key, " type")); !st.ok()) return st;
    if (!Known(type)) return r.Error(type_at, key, ": unknown value type ", type);
    GgufValue v;
    if (absl::Status st = ReadValue(r, static_cast<GgufType>(type), 0, key, &v); !st.ok()) return st;
    if (!f.metadata_.emplace(key, std::move(v)).second) {
      return r.Error(at, "metadata key ", key, " appears twice");
    }
  }
  if (const GgufValue* a = f.Find("general.alignment")) {
    if (a->type != GgufType::kU32 || a->integer == 0 || (a->integer & (a->integer - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.name_, ": general.alignment must be a u32 power of two, got ",
          a->is_integer() ? absl::StrCat(a->integer) : std::string(GgufTypeName(a->type))));
    }
    f.alignment_ = a->integer;
  }

  for (uint64_t i = 0; i < tensor_count; ++i) {
    const int64_t at = r.pos();
    GgufTensor t;
    if (absl::Status st = r.String(&t.name, kMaxTensorNameBytes, absl::StrCat("tensor ", i, " name"));
        !st.ok()) {
      return st;
    }
    auto bad = [&](auto&&... parts) { return r.Error(at, "tensor '", t.name, "': ", parts...); };
    uint32_t n_dims = 0;
    if (absl::Status st = r.Get(&n_dims, "tensor dimensions"); !st.ok()) return st;
    if (n_dims < 1 || n_dims > kMaxDims) return bad(n_dims, " dimensions (1 to ", kMaxDims, ")");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t n = 0;
      if (absl::Status st = r.Get(&n, "tensor dimension"); !st.ok()) return st;
      if (n < 1 || n > static_cast<uint64_t>(kMaxElements) ||
          numel > kMaxElements / static_cast<int64_t>(n)) {
        t.ne.push_back(static_cast<int64_t>(std::min<uint64_t>(n, INT64_MAX)));
        return bad("dimensions [", absl::StrJoin(t.ne, ", "), "] are empty or too large");
      }
      t.ne.push_back(static_cast<int64_t>(n));
      numel *= static_cast<int64_t>(n);
    }
    uint32_t type = 0;
    if (absl::Status st = r.Get(&type, "tensor type"); !st.ok()) return st;
    t.type = GgmlTypeOf(type);
    if (t.type == nullptr) return bad("unknown ggml type ", type);
    if (t.ne[0] % t.type->block_size != 0) {
      return bad("its rows of ", t.ne[0], " values are not whole ", t.type->name, " blocks of ",
                 t.type->block_size);
    }
    t.bytes = numel / t.type->block_size * t.type->type_size;
    uint64_t offset = 0;
    if (absl::Status st = r.Get(&offset, "tensor offset"); !st.ok()) return st;
    if (offset % static_cast<uint64_t>(f.alignment_) != 0) {
      return bad("data offset ", offset, " is not a multiple of the alignment ", f.alignment_);
    }
    if (offset > static_cast<uint64_t>(INT64_MAX / 2)) return bad("data offset ", offset, " is too large");
    t.offset = static_cast<int64_t>(offset);
    if (f.tensor_index_.count(t.name) != 0) return bad("the name appears twice");
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const int64_t size = static_cast<int64_t>(storage->bytes().size());
  f.data_start_ = (r.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  const int64_t data_size = std::max<int64_t>(0, size - f.data_start_);
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : f.tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.name_, ": tensor '", t.name, "': its ", t.bytes, " bytes at data offset ", t.offset,
          " run past the end of the file (the data section, from byte ", f.data_start_, ", holds ",
          data_size, ")"));
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& a = *by_offset[i - 1];
    const GgufTensor& b = *by_offset[i];
    if (a.offset + a.bytes > b.offset) {
      return absl::InvalidArgumentError(absl::StrCat(f.name_, ": tensors '", a.name, "' and '",
                                                     b.name, "' overlap in the data section"));
    }
  }
  f.storage_ = std::move(storage);
  return f;
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

template <typename T>
absl::StatusOr<T> Typed(const GgufFile& f, absl::string_view key, absl::string_view want,
                        bool (*ok)(const GgufValue&), T (*get)(const GgufValue&)) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(f.name(), ": no metadata ", key));
  if (!ok(*v)) {
    std::string got(GgufTypeName(v->type));
    if (v->type == GgufType::kArray) got = absl::StrCat("array of ", GgufTypeName(v->element));
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": metadata ", key, " must be ", want, ", not ", got));
  }
  return get(*v);
}

bool IsArrayOf(const GgufValue& v, std::initializer_list<GgufType> types) {
  if (v.type != GgufType::kArray) return false;
  for (GgufType t : types) {
    if (v.element == t) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  return Typed<int64_t>(
      *this, key, "an integer", [](const GgufValue& v) { return v.is_integer(); },
      [](const GgufValue& v) { return v.integer; });
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  return Typed<double>(
      *this, key, "a number", [](const GgufValue& v) { return v.is_float() || v.is_integer(); },
      [](const GgufValue& v) { return v.is_float() ? v.real : static_cast<double>(v.integer); });
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(absl::string_view key, int64_t absent) const {
  auto v = GetInt(key);
  return absl::IsNotFound(v.status()) ? absent : v;
}

absl::StatusOr<double> GgufFile::GetFloatOr(absl::string_view key, double absent) const {
  auto v = GetFloat(key);
  return absl::IsNotFound(v.status()) ? absent : v;
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  return Typed<bool>(
      *this, key, "a bool", [](const GgufValue& v) { return v.type == GgufType::kBool; },
      [](const GgufValue& v) { return v.integer != 0; });
}

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  return Typed<std::string>(
      *this, key, "a string", [](const GgufValue& v) { return v.type == GgufType::kString; },
      [](const GgufValue& v) { return v.string; });
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStrings(absl::string_view key) const {
  return Typed<const std::vector<std::string>*>(
      *this, key, "an array of strings",
      [](const GgufValue& v) { return IsArrayOf(v, {GgufType::kString}); },
      [](const GgufValue& v) { return &v.strings; });
}

absl::StatusOr<const std::vector<int64_t>*> GgufFile::GetInts(absl::string_view key) const {
  return Typed<const std::vector<int64_t>*>(
      *this, key, "an array of integers",
      [](const GgufValue& v) {
        return IsArrayOf(v, {GgufType::kU8, GgufType::kI8, GgufType::kU16, GgufType::kI16,
                             GgufType::kU32, GgufType::kI32, GgufType::kU64, GgufType::kI64});
      },
      [](const GgufValue& v) { return &v.integers; });
}

absl::StatusOr<const std::vector<double>*> GgufFile::GetFloats(absl::string_view key) const {
  return Typed<const std::vector<double>*>(
      *this, key, "an array of floats",
      [](const GgufValue& v) { return IsArrayOf(v, {GgufType::kF32, GgufType::kF64}); },
      [](const GgufValue& v) { return &v.reals; });
}

const GgufTensor* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<absl::string_view> GgufFile::RowBytes(const GgufTensor& t, int64_t row_begin,
                                                     int64_t row_end) const {
  if (row_begin < 0 || row_end > t.rows() || row_begin > row_end) {
    return absl::OutOfRangeError(absl::StrCat(name_, ": tensor '", t.name, "': rows [", row_begin,
                                              ", ", row_end, ") outside its ", t.rows()));
  }
  const int64_t rb = t.row_bytes();
  return storage_->bytes().substr(data_start_ + t.offset + row_begin * rb,
                                  (row_end - row_begin) * rb);
}

void GgufFile::ReleaseRows(const GgufTensor& t, int64_t row_begin, int64_t row_end) const {
  const int64_t base = data_start_ + t.offset, rb = t.row_bytes();
  storage_->Release(base + row_begin * rb, base + row_end * rb);
}

absl::StatusOr<std::vector<float>> GgufFile::ReadRows(const GgufTensor& t, int64_t row_begin,
                                                      int64_t row_end) const {
  if (!t.type->dequantizes) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": tensor '", t.name, "' is ", t.type->name,
        ", which Flover does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, "
        "Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4 are read)"));
  }
  auto bytes = RowBytes(t, row_begin, row_end);
  if (!bytes.ok()) return bytes.status();
  std::vector<float> out((row_end - row_begin) * t.cols());
  GgmlDequantize(*t.type, reinterpret_cast<const uint8_t*>(bytes->data()),
                 static_cast<int64_t>(out.size()), out.data());
  ReleaseRows(t, row_begin, row_end);
  return out;
}

}  // namespace flover
