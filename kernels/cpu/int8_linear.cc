#include "kernels/cpu/int8_linear.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/cpu/onednn_linear.h"
#include "kernels/cpu/vec_math.h"

// This file is compiled with -ffp-contract=off (BUILD.bazel): a multiply and
// an add stay two roundings in the vectorized loops and in their scalar
// remainders alike, so an element's result does not depend on which of the
// two computed it (that is, on M or N).

namespace flover::kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Rows asked of oneDNN for its preferred weight layout (as in OneDnnLinear).
constexpr int kLayoutProbeRows = 32;
constexpr int kColumnBlock = 2048;  // epilogue work unit

class Int8Weight final : public Weight {
 public:
  int k() const override { return k_; }
  int n() const override { return n_; }

  int k_ = 0, n_ = 0;
  memory packed;
  std::shared_ptr<void> storage;  // packed's bytes (a WeightArena block)
  std::vector<float> scale;       // [N]: w[k, n] ~ q[k, n] * scale[n]
  std::vector<int32_t> offset;    // [N]: 128 * sum over k of q[k, n]
  std::optional<Int8PanelView> panels;
};

memory::desc SourceDesc(int rows, int K, int stride) {
  return memory::desc({rows, K}, memory::data_type::u8, memory::dims{stride, 1});
}

dnnl::matmul::primitive_desc MatmulDesc(const dnnl::engine& engine, int rows, int K, int N,
                                        int stride, const memory::desc& weights) {
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(SourceDesc(rows, K, stride), weights,
                         memory::desc({rows, N}, memory::data_type::s32, Tag::ab)),
      engine);
}

// out[n] (= or +=) epilogue(float(acc[n] - offset[n]) * (row_scale * scale[n]) + bias[n]).
template <Epilogue kEp, bool kBias>
void DequantizeRow(const int32_t* acc, const int32_t* offset, const float* scale, float row_scale,
                   const float* bias, int n0, int n1, float* out) {
  for (int n = n0; n < n1; ++n) {
    float v = static_cast<float>(acc[n] - offset[n]) * (row_scale * scale[n]);
    if (kBias) v = v + bias[n];
    if (kEp == Epilogue::kBiasGelu) v = GeluNewF(v);
    if (kEp == Epilogue::kBiasResidual) {
      out[n] = out[n] + v;
    } else {
      out[n] = v;
    }
  }
}

using DequantizeRowFn = void (*)(const int32_t*, const int32_t*, const float*, float,
                                 const float*, int, int, float*);

DequantizeRowFn DequantizerFor(Epilogue epilogue, bool has_bias) {
  switch (epilogue) {
    case Epilogue::kBiasGelu:
      return has_bias ? &DequantizeRow<Epilogue::kBiasGelu, true>
                      : &DequantizeRow<Epilogue::kBiasGelu, false>;
    case Epilogue::kBiasResidual:
      return has_bias ? &DequantizeRow<Epilogue::kBiasResidual, true>
                      : &DequantizeRow<Epilogue::kBiasResidual, false>;
    case Epilogue::kBias:
      break;
  }
  return has_bias ? &DequantizeRow<Epilogue::kBias, true> : &DequantizeRow<Epilogue::kBias, false>;
}

// Every row's int32 sums through the epilogue, in column blocks over the threads.
void Dequantize(const int32_t* acc, const Int8Weight& w, const float* row_scale, int M,
                const float* bias, Epilogue epilogue, float* out) {
  const DequantizeRowFn row_fn = DequantizerFor(epilogue, bias != nullptr);
  const int N = w.n();
  const int blocks = (N + kColumnBlock - 1) / kColumnBlock;
  const int64_t units = int64_t{M} * blocks;
#pragma omp parallel for schedule(static) if (int64_t{M} * N > 32768)
  for (int64_t u = 0; u < units; ++u) {
    const int m = static_cast<int>(u / blocks);
    const int n0 = static_cast<int>(u % blocks) * kColumnBlock;
    row_fn(acc + size_t(m) * N, w.offset.data(), w.scale.data(), row_scale[m], bias, n0,
           std::min(N, n0 + kColumnBlock), out + size_t(m) * N);
  }
}

}  // namespace

Int8Linear::Int8Linear() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
  ApplyCpuIsaToOneDnn();
}

absl::Status Int8Linear::CheckSupported() {
  if (absl::Status st = OneDnnLinear::CheckSupported(MatmulDtype::kF32); !st.ok()) return st;
  if (!Int8PanelKernelsRun()) {
    return absl::FailedPreconditionError("int8 needs a CPU with AVX-512 VNNI (this one has none)");
  }
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const int K = 64, N = 64;
  const auto pd = MatmulDesc(engine, kLayoutProbeRows, K, N, K,
                             memory::desc({K, N}, memory::data_type::s8, Tag::any));
  const std::string impl = pd.impl_info_str();
  if (impl.find("vnni") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(
        "oneDNN's int8 matmul on this CPU is '", impl,
        "', not a VNNI kernel (whose int32 sums are exact); int8 needs AVX-512 VNNI"));
  }
  return absl::OkStatus();
}

float Int8Linear::QuantizeRow(const float* x, int K, int8_t* q) {
  // max |x| taken over the bit patterns with the sign cleared: for
  // non-negative floats their order is the values' order, and an integer
  // max vectorizes where a float one (NaN rules) does not. A NaN input
  // gives a NaN scale, so NaN results, as f32 would.
  uint32_t top = 0;
  for (int k = 0; k < K; ++k) {
    uint32_t bits;
    std::memcpy(&bits, x + k, sizeof(bits));
    top = std::max(top, bits & 0x7fffffffu);
  }
  float amax;
  std::memcpy(&amax, &top, sizeof(amax));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int k = 0; k < K; ++k) {
    const float r = std::nearbyint(x[k] * inv);
    q[k] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, r)));
  }
  return amax / 127.0f;
}

namespace {

// Per output column: scale = max |w| / 127, q = round(w * 127 / max |w|) (to
// nearest even). q keeps w's layout, and both are walked in memory order;
// `value(i)` reads element i as float (exactly, whatever the stored dtype).
template <typename Value>
void QuantizePerColumn(Value value, int K, int N, bool out_in, std::vector<float>& scale,
                       std::vector<int8_t>& q, std::vector<int32_t>& colsum) {
  const int outer = out_in ? N : K, inner = out_in ? K : N;
  const auto column = [&](int o, int i) { return out_in ? o : i; };
  std::vector<float> amax(N, 0.0f);
  for (int o = 0; o < outer; ++o) {
    const size_t row = size_t(o) * inner;
    for (int i = 0; i < inner; ++i) {
      float& m = amax[column(o, i)];
      m = std::max(m, std::fabs(value(row + i)));
    }
  }
  std::vector<float> inv(N);
  scale.resize(N);
  for (int n = 0; n < N; ++n) {
    scale[n] = amax[n] / 127.0f;
    inv[n] = amax[n] > 0.0f ? 127.0f / amax[n] : 0.0f;
  }
  q.assign(size_t(K) * N, 0);
  colsum.assign(N, 0);
  for (int o = 0; o < outer; ++o) {
    const size_t row = size_t(o) * inner;
    int8_t* q_row = q.data() + row;
    for (int i = 0; i < inner; ++i) {
      const int n = column(o, i);
      const float r = std::nearbyint(value(row + i) * inv[n]);
      q_row[i] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, r)));
      colsum[n] += q_row[i];
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Weight>> Int8Linear::Prepare(HostValues w, int K, int N,
                                                            WeightLayout layout) {
  UseCpuThreadsHere();
  if (K > kMaxK) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype=int8: a weight with ", K, " inputs; int8 sums are exact up to ", kMaxK));
  }
  auto weight = std::make_unique<Int8Weight>();
  weight->k_ = K;
  weight->n_ = N;
  const bool out_in = layout == WeightLayout::kOutIn;
  std::vector<int8_t> q;
  std::vector<int32_t> colsum;
  const auto* bits = static_cast<const uint16_t*>(w.data);
  switch (w.dtype) {
    case DType::kF32: {
      const auto* f = static_cast<const float*>(w.data);
      QuantizePerColumn([f](size_t i) { return f[i]; }, K, N, out_in, weight->scale, q, colsum);
      break;
    }
    case DType::kBF16:
      QuantizePerColumn([bits](size_t i) { return Bf16ToFloat(bits[i]); }, K, N, out_in,
                        weight->scale, q, colsum);
      break;
    case DType::kF16:
      QuantizePerColumn([bits](size_t i) { return HalfToFloat(bits[i]); }, K, N, out_in,
                        weight->scale, q, colsum);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "--dtype=int8: weights in ", DTypeName(w.dtype), "; f32, bf16 or f16 are quantized"));
  }
  weight->offset.resize(N);
  for (int n = 0; n < N; ++n) weight->offset[n] = 128 * colsum[n];

  const auto probe = MatmulDesc(engine_, kLayoutProbeRows, K, N, XStride(K),
                                memory::desc({K, N}, memory::data_type::s8, Tag::any));
  memory src({{K, N}, memory::data_type::s8, out_in ? Tag::ba : Tag::ab}, engine_, q.data());
  WeightArena::Block block = arena_.Allocate(probe.weights_desc().get_size());
  if (block.data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", probe.weights_desc().get_size(), " bytes for an int8 weight"));
  }
  weight->packed = memory(probe.weights_desc(), engine_, block.data);
  weight->storage = std::move(block.owner);
  dnnl::reorder(src, weight->packed).execute(stream_, src, weight->packed);
  stream_.wait();

  // The panel kernel reads BA16a64b4a: 64-column panels of [k_padded / 4][64][4].
  const std::optional<int> k_padded =
      Int8PanelKernelsRun() ? OneDnnLinear::PanelKPadded(weight->packed, 4) : std::nullopt;
  if (k_padded) {
    Int8PanelView view;
    view.data = static_cast<const int8_t*>(weight->packed.get_data_handle());
    view.k = K;
    view.n = N;
    view.k_padded = *k_padded;
    // Integer sums leave nothing to match but the layout; checked once per shape.
    if (panel_shapes_.count({K, N}) != 0 || PanelsMatch(*weight, view)) {
      panel_shapes_.insert({K, N});
      weight->panels = view;
    }
  }
  return weight;
}

bool Int8Linear::PanelsMatch(const Weight& weight, const Int8PanelView& view) {
  const auto& w = static_cast<const Int8Weight&>(weight);
  constexpr int kRows = kPanelMaxRows + 1;
  const int K = w.k(), N = w.n();
  const std::vector<float> x = PanelProbeValues(size_t(kRows) * K, 1);
  QuantizeRows(x.data(), kRows, kRows, K);
  std::vector<int32_t> want(size_t(kRows) * N), got(size_t(kRows) * N);
  memory src(SourceDesc(kRows, K, XStride(K)), engine_, xq_.data());
  memory dst({{kRows, N}, memory::data_type::s32, Tag::ab}, engine_, want.data());
  dnnl::matmul(MatmulDesc(engine_, kRows, K, N, XStride(K), w.packed.get_desc()))
      .execute(stream_, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w.packed}, {DNNL_ARG_DST, dst}});
  stream_.wait();
  PanelMatmulInt8(view, xq_.data(), XStride(K), kPanelMaxRows, got.data());
  PanelMatmulInt8(view, xq_.data() + size_t(kPanelMaxRows) * XStride(K), XStride(K), 1,
                  got.data() + size_t(kPanelMaxRows) * N);
  return want == got;
}

bool Int8Linear::RunsOnPanels(const Weight& weight, int M) const {
  const auto& w = static_cast<const Int8Weight&>(weight);
  return panels_enabled_ && w.panels.has_value() && M >= 1 && M <= kPanelMaxRows;
}

void Int8Linear::Quantized(const Weight& weight, std::vector<int8_t>* q,
                           std::vector<float>* scale) {
  const auto& w = static_cast<const Int8Weight&>(weight);
  const int K = w.k(), N = w.n();
  q->assign(size_t(K) * N, 0);
  memory dst({{K, N}, memory::data_type::s8, Tag::ab}, w.packed.get_engine(), q->data());
  dnnl::stream stream(w.packed.get_engine());
  dnnl::reorder(w.packed, dst).execute(stream, const_cast<memory&>(w.packed), dst);
  stream.wait();
  *scale = w.scale;
}

void Int8Linear::Reserve(int rows, int K, int N) {
  const size_t in = size_t(rows) * XStride(K);
  if (xq_.size() < in) xq_.resize(in);
  if (row_scale_.size() < size_t(rows)) row_scale_.resize(rows);
  if (acc_.size() < size_t(rows) * N) acc_.resize(size_t(rows) * N);
}

void Int8Linear::QuantizeRows(const float* x, int M, int rows, int K) {
  const int stride = XStride(K);
  Reserve(rows, K, 0);
  uint8_t* xq = xq_.data();
#pragma omp parallel for schedule(static) if (int64_t{M} * K > 65536)
  for (int m = 0; m < rows; ++m) {
    uint8_t* row = xq + size_t(m) * stride;
    int8_t* q = reinterpret_cast<int8_t*>(row);
    row_scale_[m] = m < M ? QuantizeRow(x + size_t(m) * K, K, q) : 0.0f;
    if (m >= M) std::memset(q, 0, K);
    // Offset by 128 (u8, as VNNI takes it); past K: 128, a zero.
    for (int k = 0; k < K; ++k) row[k] = static_cast<uint8_t>(q[k] + 128);
    std::memset(row + K, 128, stride - K);
  }
}

dnnl::matmul& Int8Linear::Primitive(int rows, int K, int N, const memory::desc& weights) {
  const Key key{rows, K, N};
  auto it = primitives_.find(key);
  if (it != primitives_.end()) return it->second;
  return primitives_.emplace(key, dnnl::matmul(MatmulDesc(engine_, rows, K, N, XStride(K), weights)))
      .first->second;
}

void Int8Linear::Run(const float* x, int M, const Weight& weight, const float* bias,
                     Epilogue epilogue, float* out) {
  UseCpuThreadsHere();
  const auto& w = static_cast<const Int8Weight&>(weight);
  const int K = w.k(), N = w.n();
  const bool panels = RunsOnPanels(w, M);
  // Padded rows (a bucket's) are zeros; each real row's int32 sums are exact
  // and so the same at any row count.
  const int rows = panels ? M : OneDnnLinear::RowBucket(M);
  QuantizeRows(x, M, rows, K);
  Reserve(rows, K, N);
  if (panels) {
    PanelMatmulInt8(*w.panels, xq_.data(), XStride(K), M, acc_.data());
  } else {
    memory src(SourceDesc(rows, K, XStride(K)), engine_, xq_.data());
    memory dst({{rows, N}, memory::data_type::s32, Tag::ab}, engine_, acc_.data());
    Primitive(rows, K, N, w.packed.get_desc())
        .execute(stream_, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w.packed}, {DNNL_ARG_DST, dst}});
    stream_.wait();
  }
  Dequantize(acc_.data(), w, row_scale_.data(), M, bias, epilogue, out);
}

void Int8Linear::PrepareRows(const Weight& weight, int max_rows) {
  UseCpuThreadsHere();
  const auto& w = static_cast<const Int8Weight&>(weight);
  int largest = 0;
  for (int M = 1; M <= max_rows; M = OneDnnLinear::RowBucket(M) + 1) {
    largest = OneDnnLinear::RowBucket(M);
    Primitive(largest, w.k(), w.n(), w.packed.get_desc());
  }
  Reserve(std::max(largest, kPanelMaxRows + 1), w.k(), w.n());
}

}  // namespace flover::kernels
