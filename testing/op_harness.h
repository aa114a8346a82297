// The harness the backend op tests share: a backend with host <-> backend
// helpers (data rounded to the tensor's dtype on the way in, widened on the
// way out), and runners that check a case on the device under test and,
// for a device other than the CPU, compare it with the CPU backend's result.
#ifndef FLOVER_KERNELS_TESTING_OP_HARNESS_H_
#define FLOVER_KERNELS_TESTING_OP_HARNESS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/vec_math.h"
#include "testing/numerics.h"
#include "testing/required_devices.h"

namespace flover::kernels::testing {

using ::flover::testing::RelErr;

// f rounded to nearest even in `dtype` (f32: unchanged), written here from
// the definition: a multiple of the quantum at f's binade. Values stay far
// from overflow in these tests.
inline float RoundTo(float f, DType dtype) {
  if (dtype == DType::kF32 || f == 0.0f || !std::isfinite(f)) return f;
  const int mantissa_bits = dtype == DType::kBF16 ? 7 : 10;
  const int min_exponent = dtype == DType::kBF16 ? -126 : -14;
  int e = 0;
  std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa_bits);
  return static_cast<float>(std::nearbyint(f / quantum) * quantum);  // ties to even
}

inline std::vector<float> RoundedTo(std::vector<float> v, DType dtype) {
  for (float& f : v) f = RoundTo(f, dtype);
  return v;
}

// IEEE half <-> float for test data, exact for the values RoundTo gives.
inline uint16_t HalfBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::abs(f);
  if (a == 0.0f) return static_cast<uint16_t>(sign);
  int e = 0;
  const double m = std::frexp(double{a}, &e);  // a = m * 2^e
  if (e - 1 < -14) return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::ldexp(a, 24)));
  const uint32_t exponent = static_cast<uint32_t>(e - 1 + 15);
  const uint32_t mantissa = static_cast<uint32_t>((m * 2 - 1) * 1024);
  return static_cast<uint16_t>(sign | (exponent << 10) | mantissa);
}

inline float HalfToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double v = exponent == 0 ? std::ldexp(mantissa, -24)
                                 : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  return static_cast<float>((h & 0x8000) ? -v : v);
}

// A backend with host <-> backend helpers that keep their buffers alive.
class Dev {
 public:
  explicit Dev(std::unique_ptr<Backend> backend) : b_(std::move(backend)) {}
  Backend& operator*() { return *b_; }
  Backend* operator->() { return b_.get(); }

  // values (rounded to dtype) as a [rows, cols] tensor of dtype.
  Tensor Up(const std::vector<float>& values, int64_t rows, int64_t cols,
            DType dtype = DType::kF32) {
    EXPECT_EQ(int64_t(values.size()), rows * cols);
    Tensor t = New(dtype, rows, cols);
    if (dtype == DType::kF32) {
      EXPECT_TRUE(b_->Upload(values.data(), t).ok());
    } else {
      std::vector<uint16_t> bits(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        const float r = RoundTo(values[i], dtype);
        bits[i] = dtype == DType::kBF16 ? ToBf16(r) : HalfBits(r);
      }
      EXPECT_TRUE(b_->Upload(bits.data(), t).ok());
    }
    return t;
  }
  Tensor UpInts(const std::vector<int32_t>& values, int64_t rows, int64_t cols) {
    Tensor t = New(DType::kI32, rows, cols);
    EXPECT_TRUE(b_->Upload(values.data(), t).ok());
    return t;
  }
  Tensor New(DType dtype, int64_t rows, int64_t cols) {
    auto buf = b_->Allocate(dtype, rows, cols);
    EXPECT_TRUE(buf.ok()) << buf.status();
    buffers_.push_back(std::move(*buf));
    return buffers_.back().tensor();
  }
  // A tensor's values as float.
  std::vector<float> Down(const Tensor& t) {
    std::vector<float> out(t.elements());
    if (t.dtype == DType::kF32) {
      EXPECT_TRUE(b_->Download(t, out.data()).ok());
    } else {
      std::vector<uint16_t> bits(t.elements());
      EXPECT_TRUE(b_->Download(t, bits.data()).ok());
      for (size_t i = 0; i < bits.size(); ++i) {
        out[i] = t.dtype == DType::kBF16 ? Bf16ToFloat(bits[i]) : HalfToFloat(bits[i]);
      }
    }
    return out;
  }
  // A sequence table and its block table in both memories (the host copies
  // live as long as this Dev).
  SeqTable Seqs(const std::vector<SeqRows>& seqs, int num_rows,
                const std::vector<int32_t>& block_ids = {}) {
    std::vector<int32_t> flat;
    int max_context = 0;
    for (const SeqRows& s : seqs) {
      flat.insert(flat.end(), {s.blocks, s.pos, s.len, s.row});
      max_context = std::max(max_context, s.pos + s.len);
    }
    SeqTable t{seqs.data(), int(seqs.size()), UpInts(flat, int64_t(seqs.size()), 4), num_rows,
               max_context};
    kept_.push_back(std::make_unique<std::vector<int32_t>>(block_ids));
    t.block_ids = kept_.back()->data();
    t.num_block_ids = static_cast<int>(block_ids.size());
    t.block_ids_device = block_ids.empty() ? Tensor{nullptr, DType::kI32, 1, 0}
                                           : UpInts(block_ids, 1, int64_t(block_ids.size()));
    return t;
  }

 private:
  std::unique_ptr<Backend> b_;
  std::vector<Buffer> buffers_;
  std::vector<std::unique_ptr<std::vector<int32_t>>> kept_;
};

// The backend for (device, dtypes), or null with *skip set.
inline std::unique_ptr<Dev> MakeDev(const std::string& device, MatmulDtype matmul, KvFormat kv,
                             std::string* skip) {
  BackendOptions o;
  o.device = device;
  o.matmul = matmul;
  o.kv = kv;
  auto b = CreateBackend(o);
  if (!b.ok()) {
    *skip = std::string(b.status().message());
    // A device that must run here fails the test; a dtype it does not
    // offer (f16 on the CPU, q8_0 KV on CUDA) is still a skip.
    if (::flover::testing::DeviceRequired(device) && skip->find("dtype=") == std::string::npos) {
      ADD_FAILURE() << device << " is required here (FLOVER_REQUIRE_DEVICES): " << *skip;
    }
    return nullptr;
  }
  return std::make_unique<Dev>(std::move(*b));
}

// Runs `run_case` on the device under test (its own checks against the
// naive reference inside) and, for a device other than the CPU, again on the
// CPU backend with the same dtypes, comparing the two outputs within `tol`.
// Returns false (with *skip set) when the device cannot run here.
using Case = std::function<std::vector<float>(Dev&)>;
inline bool RunOnDeviceAndCpu(const std::string& device, MatmulDtype matmul, KvFormat kv, double tol,
                       const Case& run_case, std::string* skip) {
  auto dev = MakeDev(device, matmul, kv, skip);
  if (dev == nullptr) return false;
  const std::vector<float> out = run_case(*dev);
  if (device != "cpu") {
    std::string cpu_skip;
    auto cpu = MakeDev("cpu", matmul, kv, &cpu_skip);
    if (cpu != nullptr) {
      const std::vector<float> want = run_case(*cpu);
      EXPECT_LE(RelErr(out, want), tol) << device << " vs cpu";
    } else {
      std::printf("no CPU comparison: %s\n", cpu_skip.c_str());
    }
  }
  return true;
}

#define RUN_OR_SKIP(device, matmul, kv, tol, ...)                                     \
  do {                                                                               \
    std::string _skip;                                                               \
    if (!::flover::kernels::testing::RunOnDeviceAndCpu(                              \
            device, matmul, kv, tol, ::flover::kernels::testing::Case(__VA_ARGS__), &_skip)) { \
      GTEST_SKIP() << device << ": " << _skip;                                       \
    }                                                                                \
  } while (0)

// For tests that loop over dtypes: runs what the device can, notes what it
// cannot, and skips only when nothing ran.
class Ran {
 public:
  void Run(const std::string& device, MatmulDtype matmul, KvFormat kv, double tol, const Case& fn) {
    std::string skip;
    if (RunOnDeviceAndCpu(device, matmul, kv, tol, fn, &skip)) {
      ++ran_;
    } else {
      std::printf("%s %s/%s not run: %s\n", device.c_str(), MatmulDtypeName(matmul),
                  KvFormatName(kv).c_str(), skip.c_str());
      skip_ = skip;
    }
  }
  bool none() const { return ran_ == 0; }
  const std::string& why() const { return skip_; }

 private:
  int ran_ = 0;
  std::string skip_;
};

}  // namespace flover::kernels::testing

#endif  // FLOVER_KERNELS_TESTING_OP_HARNESS_H_
