// Writes GGUF bytes for tests: metadata of any type and tensors of raw
// bytes, laid out as the format specifies (version 3, little-endian, data
// aligned). Tests corrupt the result to check the reader's errors, or build
// small models whose metadata they choose.
#ifndef FLOVER_TESTING_GGUF_WRITER_H_
#define FLOVER_TESTING_GGUF_WRITER_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace flover::testing {

class GgufWriter {
 public:
  // Value type ids (gguf_type).
  enum Type : uint32_t {
    kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6,
    kBool = 7, kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
  };

  // A value's encoding (its type id first, then the payload).
  static std::string Str(const std::string& s) { return Raw<uint64_t>(s.size()) + s; }
  template <typename T>
  static std::string Raw(T v) {
    std::string out(sizeof(T), '\0');
    std::memcpy(out.data(), &v, sizeof(T));
    return out;
  }

  GgufWriter& Kv(const std::string& key, Type type, const std::string& payload) {
    kv_ += Str(key) + Raw<uint32_t>(type) + payload;
    ++kv_count_;
    return *this;
  }
  GgufWriter& U32(const std::string& key, uint32_t v) { return Kv(key, kU32, Raw(v)); }
  GgufWriter& I32(const std::string& key, int32_t v) { return Kv(key, kI32, Raw(v)); }
  GgufWriter& U64(const std::string& key, uint64_t v) { return Kv(key, kU64, Raw(v)); }
  GgufWriter& F32(const std::string& key, float v) { return Kv(key, kF32, Raw(v)); }
  GgufWriter& F64(const std::string& key, double v) { return Kv(key, kF64, Raw(v)); }
  GgufWriter& Bool(const std::string& key, bool v) { return Kv(key, kBool, Raw<uint8_t>(v)); }
  GgufWriter& String(const std::string& key, const std::string& v) { return Kv(key, kString, Str(v)); }
  GgufWriter& Strings(const std::string& key, const std::vector<std::string>& v) {
    std::string p = Raw<uint32_t>(kString) + Raw<uint64_t>(v.size());
    for (const std::string& s : v) p += Str(s);
    return Kv(key, kArray, p);
  }
  template <typename T>
  GgufWriter& Array(const std::string& key, Type element, const std::vector<T>& v) {
    std::string p = Raw<uint32_t>(element) + Raw<uint64_t>(v.size());
    for (const T& x : v) p += Raw(x);
    return Kv(key, kArray, p);
  }

  // A tensor of `type` (a ggml type id) with ggml's dimensions (ne[0]
  // fastest) and `data` as its bytes.
  GgufWriter& Tensor(const std::string& name, uint32_t type, const std::vector<uint64_t>& ne,
                     std::string data) {
    tensors_.push_back({name, type, ne, std::move(data)});
    return *this;
  }
  GgufWriter& F32Tensor(const std::string& name, const std::vector<uint64_t>& ne,
                        const std::vector<float>& values) {
    std::string data(values.size() * 4, '\0');
    std::memcpy(data.data(), values.data(), data.size());
    return Tensor(name, 0, ne, std::move(data));
  }

  std::string Bytes(uint32_t alignment = 32, uint32_t version = 3) const {
    std::string out = "GGUF" + Raw(version) + Raw<uint64_t>(tensors_.size()) +
                      Raw<uint64_t>(kv_count_) + kv_;
    std::vector<uint64_t> offsets;
    uint64_t at = 0;
    for (const TensorEntry& t : tensors_) {
      offsets.push_back(at);
      at += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorEntry& t = tensors_[i];
      out += Str(t.name) + Raw<uint32_t>(t.ne.size());
      for (uint64_t d : t.ne) out += Raw(d);
      out += Raw(t.type) + Raw(offsets[i]);
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    for (const TensorEntry& t : tensors_) {
      out += t.data;
      out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    }
    return out;
  }

 private:
  struct TensorEntry {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    std::string data;
  };
  std::string kv_;
  uint64_t kv_count_ = 0;
  std::vector<TensorEntry> tensors_;
};

}  // namespace flover::testing

#endif  // FLOVER_TESTING_GGUF_WRITER_H_
