#include "kernels/cpu/onednn_linear.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_threads.h"
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
  CpuWeight(int K, int N, memory packed, std::shared_ptr<void> storage)
      : k_(K), n_(N), packed_(std::move(packed)), storage_(std::move(storage)) {}
  int k() const override { return k_; }
  int n() const override { return n_; }
  const memory& packed() const { return packed_; }

  // This weight as panels, set at Prepare where its shape has a K chunking
  // under which the panel kernels match oneDNN.
  std::optional<PanelView> panels;

 private:
  int k_, n_;
  memory packed_;
  std::shared_ptr<void> storage_;  // packed_'s bytes (a WeightArena block)
};

unsigned EpilogueBit(bool has_bias, Epilogue epilogue) {
  return 1u << (2 * static_cast<int>(epilogue) + (has_bias ? 1 : 0));
}

// oneDNN 2.6's brgemm matmul sums K in blocks of this many (measured: 768 ->
// 512, 3072 -> 1024); tried first, then the other candidates.
int OneDnnKChunk(int K) { return K <= 512 ? K : (K < 2048 ? 512 : 1024); }

MatmulDtype AfterCappingOneDnn(MatmulDtype dtype) {
  ApplyCpuIsaToOneDnn();
  return dtype;
}

}  // namespace

std::optional<int> OneDnnLinear::PanelKPadded(const dnnl::memory& packed, int k_group) {
  const dnnl_memory_desc_t& d = packed.get_desc().data;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const bool grouped = k_group > 1;
  const bool ok =
      d.format_kind == dnnl_blocked && d.ndims == 2 && d.extra.flags == 0 &&
      b.inner_nblks == (grouped ? 3 : 2) && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 &&
      b.inner_blks[1] == kPanelColumns && b.inner_idxs[1] == 1 &&
      (!grouped || (b.inner_blks[2] == k_group && b.inner_idxs[2] == 0)) &&
      d.padded_dims[1] % kPanelColumns == 0 && b.strides[0] == 16 * k_group * kPanelColumns &&
      b.strides[1] == d.padded_dims[0] * kPanelColumns;
  if (!ok) return std::nullopt;
  return static_cast<int>(d.padded_dims[0]);
}

OneDnnLinear::OneDnnLinear(MatmulDtype dtype)
    : dtype_(AfterCappingOneDnn(dtype)), weight_type_(TypeOf(dtype)),
      engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

absl::Status OneDnnLinear::CheckSupported(MatmulDtype dtype) {
  ApplyCpuIsaToOneDnn();
  if (dtype == MatmulDtype::kF16) {
    return absl::FailedPreconditionError(
        "the CPU backend runs f32, bf16 and int8 linear layers; f16 is for --device=cuda");
  }
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const memory::data_type t = TypeOf(dtype);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(memory::desc({kLayoutProbeRows, 64}, t, Tag::ab),
                           memory::desc({64, 64}, t, Tag::any),
                           memory::desc({kLayoutProbeRows, 64}, kF32, Tag::ab)),
        engine);
  } catch (const dnnl::error& e) {
    return absl::FailedPreconditionError(absl::StrCat(
        "oneDNN has no ", MatmulDtypeName(dtype), " matmul under isa ", CpuIsaName(), ": ", e.what()));
  }
  const std::string impl = pd.impl_info_str();
  if (impl.rfind("ref", 0) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this CPU has no optimized ", MatmulDtypeName(dtype),
        " matmul in oneDNN (it would run its reference kernel '", impl, "')",
        dtype == MatmulDtype::kBF16 ? "; bf16 needs AVX-512" : ""));
  }
  return absl::OkStatus();
}

std::unique_ptr<Weight> OneDnnLinear::Prepare(HostValues w, int K, int N, WeightLayout layout) {
  UseCpuThreadsHere();
  // The reorder packs f32 or bf16 values into this linear's type: exactly,
  // but for f32 into bf16, which it rounds to nearest even.
  const memory::data_type stored = w.dtype == DType::kBF16 ? memory::data_type::bf16 : kF32;
  const memory::desc user({K, N}, stored, layout == WeightLayout::kInOut ? Tag::ab : Tag::ba);
  const dnnl::matmul::primitive_desc probe(
      dnnl::matmul::desc(memory::desc({kLayoutProbeRows, K}, weight_type_, Tag::ab),
                         memory::desc({K, N}, weight_type_, Tag::any),
                         memory::desc({kLayoutProbeRows, N}, kF32, Tag::ab)),
      engine_);
  memory src(user, engine_, const_cast<void*>(w.data));
  WeightArena::Block block = arena_.Allocate(probe.weights_desc().get_size());
  memory packed = block.data != nullptr ? memory(probe.weights_desc(), engine_, block.data)
                                        : memory(probe.weights_desc(), engine_);
  dnnl::reorder(src, packed).execute(stream_, src, packed);
  stream_.wait();
  auto weight = std::make_unique<CpuWeight>(K, N, std::move(packed), std::move(block.owner));
  weight->panels = FindPanels(*weight);
  return weight;
}

std::optional<PanelView> OneDnnLinear::FindPanels(const Weight& weight) {
  const auto& w = static_cast<const CpuWeight&>(weight);
  const bool bf16 = dtype_ == MatmulDtype::kBF16;
  const int K = w.k(), N = w.n();
  if (!PanelKernelsRun(bf16) || (bf16 && K % 2 != 0)) return std::nullopt;
  // The layout must be exactly the one the kernels read (BA16a64b or
  // BA16a64b2a, panels one after another).
  const int pairs = bf16 ? 2 : 1;
  const std::optional<int> k_padded = PanelKPadded(w.packed(), pairs);
  if (!k_padded) return std::nullopt;
  PanelView view;
  view.data = w.packed().get_data_handle();
  view.bf16 = bf16;
  view.k = K;
  view.n = N;
  view.k_padded = *k_padded;
  // The summation order belongs to oneDNN's kernel for the shape, not to the
  // values: found with the first weight of a shape, kept for the others.
  auto [it, first] = panel_shapes_.try_emplace({K, N});
  PanelShape& shape = it->second;
  if (first) {
    std::vector<int> tried;
    for (int chunk : {OneDnnKChunk(K), K, 512, 1024, 256, 2048}) {
      chunk = std::min(chunk, K);
      if (std::find(tried.begin(), tried.end(), chunk) != tried.end() || chunk % pairs != 0) continue;
      tried.push_back(chunk);
      view.k_chunk = chunk;
      if (PanelsMatch(w, view, false, Epilogue::kBias)) {
        shape = PanelShape{chunk, EpilogueBit(false, Epilogue::kBias)};
        break;
      }
    }
  }
  if (shape.k_chunk == 0) return std::nullopt;
  view.k_chunk = shape.k_chunk;
  return view;
}

bool OneDnnLinear::PanelsMatch(const Weight& w, const PanelView& view, bool has_bias,
                               Epilogue epilogue) {
  constexpr int kRows = kPanelMaxRows + 1;
  const int K = w.k(), N = w.n();
  const std::vector<float> x = PanelProbeValues(size_t(kRows) * K, 1);
  const std::vector<float> bias = PanelProbeValues(N, 2);
  std::vector<float> want = PanelProbeValues(size_t(kRows) * N, 3);  // the residual, when added
  std::vector<float> got = want;
  const float* b = has_bias ? bias.data() : nullptr;
  dnnl::matmul mm = MakePrimitive(Key{kRows, K, N, has_bias, epilogue},
                                  static_cast<const CpuWeight&>(w).packed().get_desc());
  RunOneDnn(mm, x.data(), kRows, w, b, epilogue, want.data());
  // Both kernel shapes the rows can take: kPanelMaxRows rows, then one.
  RunPanels(view, x.data(), kPanelMaxRows, b, epilogue, got.data());
  RunPanels(view, x.data() + size_t(kPanelMaxRows) * K, 1, b, epilogue,
            got.data() + size_t(kPanelMaxRows) * N);
  return std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
}

bool OneDnnLinear::RunsOnPanels(const Weight& weight, int M, bool has_bias,
                                Epilogue epilogue) const {
  const auto& w = static_cast<const CpuWeight&>(weight);
  if (M < 1 || M > kPanelMaxRows || !w.panels) return false;
  const auto it = panel_shapes_.find({w.k(), w.n()});
  return it != panel_shapes_.end() && (it->second.epilogues & EpilogueBit(has_bias, epilogue)) != 0;
}

dnnl::eltwise_forward& OneDnnLinear::Gelu(int M, int N) {
  auto it = gelu_.find({M, N});
  if (it != gelu_.end()) return it->second;
  const memory::desc md({M, N}, kF32, Tag::ab);
  const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference,
                                         dnnl::algorithm::eltwise_gelu_tanh, md, 0.0f, 0.0f);
  return gelu_.emplace(std::make_pair(M, N),
                       dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(desc, engine_)))
      .first->second;
}

void OneDnnLinear::RunPanels(const PanelView& view, const float* x, int M, const float* bias,
                             Epilogue epilogue, float* out) {
  const void* src = view.bf16 ? static_cast<const void*>(RoundRows(x, M, M, view.k)) : x;
  PanelMatmul(view, src, M, bias, epilogue == Epilogue::kBiasResidual, out);
  if (epilogue == Epilogue::kBiasGelu) {
    memory rows({{M, view.n}, kF32, Tag::ab}, engine_, out);
    Gelu(M, view.n).execute(stream_, {{DNNL_ARG_SRC, rows}, {DNNL_ARG_DST, rows}});
    stream_.wait();
  }
}

dnnl::matmul OneDnnLinear::MakePrimitive(const Key& key, const memory::desc& weights) {
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
  return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine_));
}

dnnl::matmul& OneDnnLinear::Primitive(const Key& key, const memory::desc& weights) {
  auto it = primitives_.find(key);
  if (it != primitives_.end()) return it->second;
  return primitives_.emplace(key, MakePrimitive(key, weights)).first->second;
}

void OneDnnLinear::Run(const float* x, int M, const Weight& weight, const float* bias,
                       Epilogue epilogue, float* out) {
  UseCpuThreadsHere();
  const auto& w = static_cast<const CpuWeight&>(weight);
  if (panels_enabled_ && RunsOnPanels(w, M, bias != nullptr, epilogue)) {
    RunPanels(*w.panels, x, M, bias, epilogue, out);
    return;
  }
  const Key key{RowBucket(M), w.k(), w.n(), bias != nullptr, epilogue};
  RunOneDnn(Primitive(key, w.packed().get_desc()), x, M, w, bias, epilogue, out);
}

const uint16_t* OneDnnLinear::RoundRows(const float* x, int M, int rows, int K) {
  ReserveScratch(rows, K, 0);
  uint16_t* b = src_bf16_.data();
  const int64_t n = int64_t{M} * K;
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) b[i] = ToBf16(x[i]);
  std::memset(b + n, 0, size_t(rows - M) * K * sizeof(uint16_t));
  return b;
}

void OneDnnLinear::RunOneDnn(dnnl::matmul& mm, const float* x, int M, const Weight& weight,
                             const float* bias, Epilogue epilogue, float* out) {
  const auto& w = static_cast<const CpuWeight&>(weight);
  const int K = w.k(), N = w.n();
  const int rows = RowBucket(M);
  // Padded rows are zeros (never stale values that could be denormal);
  // each real row computes exactly as it would at any other row count.
  void* src_rows = const_cast<float*>(x);
  if (rows != M) ReserveScratch(rows, K, N);
  if (dtype_ == MatmulDtype::kBF16) {
    src_rows = const_cast<uint16_t*>(RoundRows(x, M, rows, K));  // reserves its own input
  } else if (rows != M) {
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
  UseCpuThreadsHere();
  const auto& w = static_cast<const CpuWeight&>(weight);
  int largest = 0;
  for (int M = 1; M <= max_rows; M = RowBucket(M) + 1) {
    largest = RowBucket(M);
    Primitive(Key{largest, w.k(), w.n(), has_bias, epilogue}, w.packed().get_desc());
  }
  ReserveScratch(largest, w.k(), w.n());
  const unsigned bit = EpilogueBit(has_bias, epilogue);
  if (!w.panels) return;
  PanelShape& shape = panel_shapes_.at({w.k(), w.n()});
  if ((shape.epilogues & bit) == 0 && PanelsMatch(w, *w.panels, has_bias, epilogue)) {
    shape.epilogues |= bit;
    if (epilogue == Epilogue::kBiasGelu) {
      for (int M = 1; M <= kPanelMaxRows; ++M) Gelu(M, w.n());
    }
  }
}

}  // namespace flover::kernels
