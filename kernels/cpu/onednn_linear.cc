#include "kernels/cpu/onednn_linear.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/vec_math.h"

namespace flover::kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

memory::data_type TypeOf(MatmulDtype dtype) {
  return dtype == MatmulDtype::kBF16 ? memory::data_type::bf16 : kF32;
}

// Row count used to ask oneDNN for its preferred weight layout; the layout it
// picks serves every row count (checked by the tests through every path).
constexpr int kLayoutProbeRows = 32;

class CpuWeight final : public Weight {
 public:
  CpuWeight(int K, int N, memory packed) : k_(K), n_(N), packed_(std::move(packed)) {}
  int k() const override { return k_; }
  int n() const override { return n_; }
  const memory& packed() const { return packed_; }

 private:
  int k_, n_;
  memory packed_;
};

// On CPUs with AMX (Sapphire Rapids and later Xeons), oneDNN runs bf16
// matmuls of some row counts on AMX tiles and others on AVX-512 BF16, and the
// two sum in different orders: a row's result then depends on M (seen on the
// Xeon of our GPU host: one golden test ran 70 matmuls on AMX and 272 on
// AVX-512, and chunked prefill stopped matching one prefill bitwise). Capping
// oneDNN at AVX-512 BF16 keeps one kernel family for every M; f32 never uses
// AMX, and CPUs without it are unaffected. It must happen before oneDNN
// first looks at the CPU; where that is too late (ONEDNN_MAX_CPU_ISA set,
// say) oneDNN keeps what it has.
void KeepOneKernelFamily() {
  static std::once_flag once;
  std::call_once(once, [] { dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16); });
}

MatmulDtype AfterKeepingOneKernelFamily(MatmulDtype dtype) {
  KeepOneKernelFamily();
  return dtype;
}

}  // namespace

OneDnnLinear::OneDnnLinear(MatmulDtype dtype)
    : dtype_(AfterKeepingOneKernelFamily(dtype)), weight_type_(TypeOf(dtype)),
      engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

absl::Status OneDnnLinear::CheckSupported(MatmulDtype dtype) {
  KeepOneKernelFamily();
  if (dtype == MatmulDtype::kF16) {
    return absl::FailedPreconditionError(
        "the CPU backend runs f32 and bf16 linear layers; f16 is for --device=cuda");
  }
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const memory::data_type t = TypeOf(dtype);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(memory::desc({kLayoutProbeRows, 64}, t, Tag::ab),
                         memory::desc({64, 64}, t, Tag::any),
                         memory::desc({kLayoutProbeRows, 64}, kF32, Tag::ab)),
      engine);
  const std::string impl = pd.impl_info_str();
  if (impl.rfind("ref", 0) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this CPU has no optimized ", MatmulDtypeName(dtype),
        " matmul in oneDNN (it would run its reference kernel '", impl, "')",
        dtype == MatmulDtype::kBF16 ? "; bf16 needs AVX-512" : ""));
  }
  return absl::OkStatus();
}

std::unique_ptr<Weight> OneDnnLinear::Prepare(const float* w, int K, int N,
                                              WeightLayout layout) {
  const memory::desc user({K, N}, kF32, layout == WeightLayout::kInOut ? Tag::ab : Tag::ba);
  const dnnl::matmul::primitive_desc probe(
      dnnl::matmul::desc(memory::desc({kLayoutProbeRows, K}, weight_type_, Tag::ab),
                         memory::desc({K, N}, weight_type_, Tag::any),
                         memory::desc({kLayoutProbeRows, N}, kF32, Tag::ab)),
      engine_);
  memory src(user, engine_, const_cast<float*>(w));  // the reorder rounds to bf16
  memory packed(probe.weights_desc(), engine_);
  dnnl::reorder(src, packed).execute(stream_, src, packed);
  stream_.wait();
  return std::make_unique<CpuWeight>(K, N, std::move(packed));
}

dnnl::matmul& OneDnnLinear::Primitive(const Key& key, const memory::desc& weights) {
  auto it = primitives_.find(key);
  if (it != primitives_.end()) return it->second;
  const auto [M, K, N, has_bias, epilogue] = key;
  dnnl::post_ops ops;
  if (epilogue == Epilogue::kBiasGelu) {
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
  } else if (epilogue == Epilogue::kBiasResidual) {
    ops.append_sum(1.0f);
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  const memory::desc src({M, K}, weight_type_, Tag::ab), dst({M, N}, kF32, Tag::ab);
  const auto desc = has_bias ? dnnl::matmul::desc(src, weights, memory::desc({1, N}, kF32, Tag::ab), dst)
                             : dnnl::matmul::desc(src, weights, dst);
  return primitives_.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine_)))
      .first->second;
}

void OneDnnLinear::Run(const float* x, int M, const Weight& weight, const float* bias,
                       Epilogue epilogue, float* out) {
  const auto& w = static_cast<const CpuWeight&>(weight);
  const int K = w.k(), N = w.n();
  const int rows = RowBucket(M);
  dnnl::matmul& mm = Primitive(Key{rows, K, N, bias != nullptr, epilogue}, w.packed().get_desc());
  // Padded rows are zeros (never stale values that could be denormal);
  // each real row computes exactly as it would at any other row count.
  void* src_rows = const_cast<float*>(x);
  if (dtype_ == MatmulDtype::kBF16) {
    ReserveScratch(rows, K, N);
    uint16_t* b = src_bf16_.data();
    const int64_t n = int64_t{M} * K;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) b[i] = ToBf16(x[i]);
    std::memset(b + n, 0, size_t(rows - M) * K * sizeof(uint16_t));
    src_rows = b;
  } else if (rows != M) {
    ReserveScratch(rows, K, N);
    std::memcpy(src_scratch_.data(), x, size_t(M) * K * sizeof(float));
    std::memset(src_scratch_.data() + size_t(M) * K, 0, size_t(rows - M) * K * sizeof(float));
    src_rows = src_scratch_.data();
  }
  float* dst_rows = out;
  if (rows != M) {
    dst_rows = dst_scratch_.data();
    if (epilogue == Epilogue::kBiasResidual) {
      std::memcpy(dst_rows, out, size_t(M) * N * sizeof(float));
    }
  }
  memory src({{rows, K}, weight_type_, Tag::ab}, engine_, src_rows);
  memory dst({{rows, N}, kF32, Tag::ab}, engine_, dst_rows);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w.packed()}, {DNNL_ARG_DST, dst}};
  if (bias != nullptr) {
    args.emplace(DNNL_ARG_BIAS, memory({{1, N}, kF32, Tag::ab}, engine_, const_cast<float*>(bias)));
  }
  mm.execute(stream_, args);
  stream_.wait();
  if (rows != M) std::memcpy(out, dst_rows, size_t(M) * N * sizeof(float));
}

int OneDnnLinear::RowBucket(int M) {
  if (M <= kExactRows) return M;
  int octave = kExactRows;
  while (octave * 2 <= M) octave *= 2;
  const int step = octave / kBucketsPerOctave;
  return (M + step - 1) / step * step;
}

void OneDnnLinear::ReserveScratch(int rows, int K, int N) {
  const size_t in = size_t(rows) * K;
  if (dtype_ == MatmulDtype::kBF16) {
    if (src_bf16_.size() < in) src_bf16_.resize(in);
  } else if (rows > kExactRows && src_scratch_.size() < in) {
    src_scratch_.resize(in);
  }
  if (rows > kExactRows && dst_scratch_.size() < size_t(rows) * N) {
    dst_scratch_.resize(size_t(rows) * N);
  }
}

void OneDnnLinear::PrepareRows(const Weight& weight, int max_rows, bool has_bias,
                               Epilogue epilogue) {
  const auto& w = static_cast<const CpuWeight&>(weight);
  int largest = 0;
  for (int M = 1; M <= max_rows; M = RowBucket(M) + 1) {
    largest = RowBucket(M);
    Primitive(Key{largest, w.k(), w.n(), has_bias, epilogue}, w.packed().get_desc());
  }
  ReserveScratch(largest, w.k(), w.n());
}

}  // namespace flover::kernels
