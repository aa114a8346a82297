// Memory a compute backend owns, and views of it.
//
// A Tensor is an address in a backend's memory (host memory for the CPU
// backend, device memory for CUDA) with a dtype and a [rows, cols] shape.
// Only the backend that allocated it reads or writes through the address;
// everyone else moves data in and out with Backend::Upload / Download. A
// Buffer owns an allocation and frees it through its backend when it goes.
// Compiles without nvcc.
#ifndef FLOVER_KERNELS_TENSOR_H_
#define FLOVER_KERNELS_TENSOR_H_

#include <cstdint>
#include <utility>

namespace flover::kernels {

enum class DType : uint8_t {
  kF32,
  kBF16,  // bfloat16 bits, stored as uint16_t
  kF16,   // IEEE half bits, stored as uint16_t
  kI32,
};

inline const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
  }
  return "?";
}

inline int DTypeBytes(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16 ? 2 : 4;
}

// A dense row-major [rows, cols] matrix of `dtype` in a backend's memory.
// Vectors are [1, n]. Copying a Tensor copies the view, not the data.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t elements() const { return rows * cols; }
  int64_t bytes() const { return elements() * DTypeBytes(dtype); }
  bool empty() const { return elements() == 0; }

  // Rows [begin, begin + count) of this tensor.
  Tensor Rows(int64_t begin, int64_t count) const {
    return {static_cast<char*>(data) + begin * cols * DTypeBytes(dtype), dtype, count, cols};
  }
  // `rows` x `cols` elements of this tensor's memory starting at element
  // `offset` (the caller keeps offset + rows * cols within elements()).
  Tensor View(int64_t offset, int64_t view_rows, int64_t view_cols) const {
    return {static_cast<char*>(data) + offset * DTypeBytes(dtype), dtype, view_rows, view_cols};
  }
  // The address as T*, for the backend that owns the memory.
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// What frees a Buffer's memory: the backend that allocated it.
class Allocator {
 public:
  virtual void Free(void* data) = 0;

 protected:
  ~Allocator() = default;
};

// One allocation, freed when the Buffer goes. Move-only; must not outlive
// the backend that allocated it.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator* owner, Tensor tensor) : owner_(owner), tensor_(tensor) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Reset();
      owner_ = std::exchange(other.owner_, nullptr);
      tensor_ = std::exchange(other.tensor_, Tensor{});
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  void Reset() {
    if (owner_ != nullptr && tensor_.data != nullptr) owner_->Free(tensor_.data);
    owner_ = nullptr;
    tensor_ = Tensor{};
  }

  const Tensor& tensor() const { return tensor_; }
  // Shorthands for the whole buffer's view.
  operator const Tensor&() const { return tensor_; }  // NOLINT: a Buffer is usable as its Tensor
  Tensor Rows(int64_t begin, int64_t count) const { return tensor_.Rows(begin, count); }
  int64_t rows() const { return tensor_.rows; }
  int64_t cols() const { return tensor_.cols; }
  bool empty() const { return tensor_.data == nullptr; }

 private:
  Allocator* owner_ = nullptr;
  Tensor tensor_;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_TENSOR_H_
