#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/checks.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/expert_groups.h"
#include "util/status_macros.h"

namespace flover::kernels::cuda {
namespace {

// The GPU generations this module carries machine code for (BUILD: sm_80,
// sm_90, plus compute_90 PTX for newer ones).
constexpr int kMinComputeCapability = 80;

enum ScratchSlot { kConvertedInput = 0, kGemmOutput = 1, kAttentionWork = 2, kExpertRows = 3 };

class CudaWeight final : public Weight {
 public:
  CudaWeight(int K, int N, DType dtype, Buffer data)
      : k_(K), n_(N), dtype_(dtype), data_(std::move(data)) {}
  int k() const override { return k_; }
  int n() const override { return n_; }
  DType dtype() const { return dtype_; }
  const void* data() const { return data_.tensor().data; }

 private:
  int k_, n_;
  DType dtype_;
  Buffer data_;  // [N, K] row-major in dtype_
};

// --dtype=native: a matrix in GGUF blocks as the file stores them, in runs
// of rows of one format each (the file's bytes on the device).
class CudaBlockWeight final : public Weight {
 public:
  int k() const override { return k_; }
  int n() const override { return n_; }

  struct Span {
    BlockFormat format;
    int row_begin, rows;
    int64_t offset;  // bytes into data
  };
  int k_ = 0, n_ = 0;
  std::vector<Span> spans;
  Buffer data;
};

double MiB(double bytes) { return bytes / (1 << 20); }

}  // namespace

absl::Status CudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string msg =
      absl::StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

namespace {

// FLOVER_CUDA_PDL: "1" launches every kernel of the module with
// programmatic dependent launch where the device supports it (see
// cuda_kernels.h); unset or "0", plain launches.
absl::StatusOr<bool> ProgrammaticLaunchFromEnvironment() {
  const char* value = std::getenv("FLOVER_CUDA_PDL");
  const std::string name = value != nullptr ? value : "";
  if (name.empty() || name == "0") return false;
  if (name == "1") return true;
  return absl::InvalidArgumentError(absl::StrCat(
      "FLOVER_CUDA_PDL=", name, ": expected 1 (programmatic launch) or 0 (the default)"));
}

// FLOVER_CUDA_EXPERTS: "device" (the default) groups LinearById's rows on
// the device where every expert takes the mma GEMM; "host" always brings
// the ids down and groups them there (the path before, kept to measure
// against).
absl::StatusOr<bool> ExpertsOnHostFromEnvironment() {
  const char* value = std::getenv("FLOVER_CUDA_EXPERTS");
  const std::string name = value != nullptr ? value : "";
  if (name.empty() || name == "device") return false;
  if (name == "host") return true;
  return absl::InvalidArgumentError(
      absl::StrCat("FLOVER_CUDA_EXPERTS=", name, ": expected device (the default) or host"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const BackendOptions& options) {
  if (options.matmul == MatmulDtype::kInt8) {
    return absl::FailedPreconditionError(
        "--dtype=int8 runs on the CPU backend only; on CUDA use f32, bf16, f16 or native");
  }
  if (options.kv.k != options.kv.v || KvDtypeQuantized(options.kv.k)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--kv_dtype=", KvFormatName(options.kv),
        ": the CUDA backend keeps keys and values in f32, bf16 or fp8, both the same; q8_0 and q4_0 run on "
        "the CPU"));
  }
  int ordinal = 0;
  if (options.device.size() > 5 && !absl::SimpleAtoi(options.device.substr(5), &ordinal)) {
    return absl::InvalidArgumentError(absl::StrCat("--device=", options.device, ": bad GPU number"));
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", options.device, ": no usable CUDA driver or GPU on this host (",
        cudaGetErrorName(e), ": ", cudaGetErrorString(e), ")"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", options.device, ": no GPU is visible on this host"));
  }
  if (ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat("--device=", options.device, ": this host has ",
                                                      count, count == 1 ? " GPU" : " GPUs"));
  }
  FLOVER_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaDeviceProp props{};
  FLOVER_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&props, ordinal), "cudaGetDeviceProperties"));
  const int cc = props.major * 10 + props.minor;
  if (cc < kMinComputeCapability) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--device=%s: %s is sm_%d; this build carries kernels for sm_80 and newer", options.device,
        props.name, cc));
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(ordinal, options.matmul, options.kv));
  b->record_steps_ = options.record_steps;
  b->device_name_ = absl::StrFormat("%s (sm_%d, GPU %d)", props.name, cc, ordinal);
  FLOVER_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  auto programmatic = ProgrammaticLaunchFromEnvironment();
  if (!programmatic.ok()) return programmatic.status();
  SetProgrammaticLaunch(*programmatic && ProgrammaticLaunchSupported());
  if (ProgrammaticLaunchOn()) absl::StrAppend(&b->device_name_, ", programmatic launch");
  auto experts_on_host = ExpertsOnHostFromEnvironment();
  if (!experts_on_host.ok()) return experts_on_host.status();
  b->experts_on_host_ = *experts_on_host;
  if (b->experts_on_host_) absl::StrAppend(&b->device_name_, ", experts grouped on the host");
  auto engine = LtGemm::EngineFromEnvironment();
  if (!engine.ok()) return engine.status();
  auto gemm = LtGemm::Create(b->stream_, *engine);
  if (!gemm.ok()) return gemm.status();
  b->gemm_ = std::move(*gemm);
  return b;
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(ordinal_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  ForgetRecorded();
  gemm_.reset();
  for (void* s : scratch_) cudaFree(s);
  for (auto& [span, table] : expert_tables_) cudaFree(table.device);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaBackend::Activate() const {
  return CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice");
}

DeviceInfo CudaBackend::Device() const {
  DeviceInfo info;
  info.kind = "cuda";
  info.name = device_name_;
  info.ordinal = ordinal_;
  size_t free_bytes = 0, total_bytes = 0;
  if (Activate().ok() && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    info.free_bytes = static_cast<int64_t>(free_bytes);
    info.total_bytes = static_cast<int64_t>(total_bytes);
  } else {
    cudaGetLastError();
  }
  return info;
}

absl::StatusOr<Buffer> CudaBackend::Allocate(DType dtype, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Allocate: negative shape [", rows, ", ", cols, "]"));
  }
  FLOVER_RETURN_IF_ERROR(Activate());
  const Tensor t{nullptr, dtype, rows, cols};
  void* data = nullptr;
  const size_t bytes = std::max<size_t>(static_cast<size_t>(t.bytes()), 256);
  if (cudaError_t e = cudaMalloc(&data, bytes); e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it, or the next op would report it
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate %.1f MiB on %s (%.0f MiB free): %s", MiB(bytes), device_name_,
        MiB(free_bytes), cudaGetErrorString(e)));
  }
  return Buffer(this, Tensor{data, dtype, rows, cols});
}

void CudaBackend::Free(void* data) {
  cudaSetDevice(ordinal_);
  cudaFree(data);
}

absl::Status CudaBackend::Upload(const void* host, const Tensor& dst) {
  FLOVER_RETURN_IF_ERROR(Activate());
  if (dst.bytes() == 0) return absl::OkStatus();
  // From pageable memory the copy is staged before this returns, so `host`
  // may be reused at once.
  return CudaStatus(cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, stream_),
                    "upload");
}

absl::Status CudaBackend::Download(const Tensor& src, void* host) {
  FLOVER_RETURN_IF_ERROR(Activate());
  if (src.bytes() > 0) {
    FLOVER_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_), "download"));
  }
  return Synchronize();
}

absl::Status CudaBackend::Synchronize() {
  FLOVER_RETURN_IF_ERROR(Activate());
  FLOVER_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "a kernel on the stream"));
  return CudaStatus(cudaGetLastError(), "a launch");
}

void* CudaBackend::AllocateStaging(size_t bytes) {
  void* host = nullptr;
  if (!Activate().ok() || cudaHostAlloc(&host, std::max<size_t>(bytes, 1), cudaHostAllocDefault) !=
                              cudaSuccess) {
    cudaGetLastError();
    return nullptr;  // the caller falls back to plain memory
  }
  return host;
}

void CudaBackend::FreeStaging(void* host) {
  if (host != nullptr) cudaFreeHost(host);
}

absl::Status CudaBackend::RunRecorded(const std::string& key,
                                      const std::function<absl::Status()>& enqueue) {
  if (!record_steps_ || capturing_) return enqueue();
  FLOVER_RETURN_IF_ERROR(Activate());
  if (auto it = recordings_.find(key); it != recordings_.end()) {
    if (it->second == nullptr) return enqueue();  // a key that cannot be recorded
    ++replays_;
    return CudaStatus(cudaGraphLaunch(it->second, stream_), "replaying a recorded step");
  }
  if (met_once_.insert(key).second) return enqueue();  // first meeting: plainly
  if (recordings_.size() >= kMaxRecordings) ForgetRecorded();

  FLOVER_RETURN_IF_ERROR(CudaStatus(
      cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "starting a recording"));
  capturing_ = true;
  const absl::Status enqueued = enqueue();
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  cudaError_t made = ended;
  if (enqueued.ok() && ended == cudaSuccess) made = cudaGraphInstantiate(&exec, graph, 0);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!enqueued.ok() || made != cudaSuccess) {
    // Nothing ran while recording: run the step plainly instead, and do not
    // try this key again (it would fail the same way).
    cudaGetLastError();
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    recordings_.emplace(key, nullptr);
    return enqueue();
  }
  recordings_.emplace(key, exec);
  ++replays_;
  return CudaStatus(cudaGraphLaunch(exec, stream_), "replaying a recorded step");
}

void CudaBackend::ForgetRecorded() {
  for (auto& [key, exec] : recordings_) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
  recordings_.clear();
  met_once_.clear();
}

absl::StatusOr<void*> CudaBackend::Scratch(int slot, size_t bytes) {
  if (bytes <= scratch_bytes_[slot]) return scratch_[slot];
  if (capturing_) {  // freeing waits for the device, which a recording cannot hold
    return absl::FailedPreconditionError("work space would grow while recording a step");
  }
  ForgetRecorded();  // recordings name the old space
  // Freeing waits for the device, so what still reads the old space is done.
  cudaFree(scratch_[slot]);
  scratch_[slot] = nullptr;
  scratch_bytes_[slot] = 0;
  const size_t grown = std::max(bytes, size_t{1} << 20);
  if (cudaError_t e = cudaMalloc(&scratch_[slot], grown); e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate %.1f MiB of work space on %s", MiB(grown), device_name_));
  }
  scratch_bytes_[slot] = grown;
  return scratch_[slot];
}

absl::StatusOr<std::unique_ptr<Weight>> CudaBackend::PrepareWeight(HostValues stored, int K,
                                                                   int N, WeightLayout layout) {
  FLOVER_RETURN_IF_ERROR(CheckPrepareWeightArgs(stored, K, N, matmul_ == MatmulDtype::kNative));
  FLOVER_RETURN_IF_ERROR(Activate());
  if (stored.is_blocks()) return PrepareBlocks(stored, K, N, layout);
  // Widened on the host (exactly), one matrix at a time.
  std::vector<float> wide;
  if (stored.dtype != DType::kF32) wide = WidenToF32(stored, int64_t{K} * N);
  const float* w = stored.dtype == DType::kF32 ? static_cast<const float*>(stored.data) : wide.data();
  // Stored [N, K]: one row per output ("TN" GEMMs, the layout every
  // cuBLASLt tensor-core kernel takes). Transposed here, rounded on the GPU.
  std::vector<float> rows(size_t(N) * K);
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) {
      rows[size_t(n) * K + k] = layout == WeightLayout::kOutIn ? w[size_t(n) * K + k] : w[size_t(k) * N + n];
    }
  }
  const DType dtype = ToDType(matmul_);
  auto staged = Allocate(DType::kF32, N, K);
  if (!staged.ok()) return staged.status();
  FLOVER_RETURN_IF_ERROR(Upload(rows.data(), *staged));
  Buffer data;
  if (dtype == DType::kF32) {
    data = std::move(*staged);
  } else {
    auto converted = Allocate(dtype, N, K);
    if (!converted.ok()) return converted.status();
    FLOVER_RETURN_IF_ERROR(CudaStatus(
        LaunchConvert(staged->tensor().as<float>(), int64_t{N} * K, converted->tensor().data, dtype, stream_),
        "weight conversion"));
    data = std::move(*converted);
    // The staging buffer is freed when `staged` goes (cudaFree waits for the
    // conversion); `rows` must outlive the upload, which Synchronize ensures.
  }
  FLOVER_RETURN_IF_ERROR(Synchronize());
  return std::unique_ptr<Weight>(new CudaWeight(K, N, dtype, std::move(data)));
}

absl::StatusOr<std::unique_ptr<Weight>> CudaBackend::PrepareBlocks(const HostValues& stored, int K, int N,
                                                                   WeightLayout layout) {
  if (layout != WeightLayout::kOutIn) {
    return absl::InvalidArgumentError("quantized blocks come one row per output ([N, K])");
  }
  auto w = std::make_unique<CudaBlockWeight>();
  w->k_ = K;
  w->n_ = N;
  int64_t bytes = 0;
  int row = 0;
  for (int i = 0; i < stored.num_spans; ++i) {
    const BlockSpan& span = stored.spans[i];
    if (span.rows < 0 || K % 32 != 0 || K % InfoOf(span.format).block_values != 0) {
      return absl::InvalidArgumentError(absl::StrCat(InfoOf(span.format).name, " rows of ", K,
                                                     " values are not whole blocks of 32-value sub-blocks"));
    }
    w->spans.push_back({span.format, row, span.rows, bytes});
    bytes += span.rows * BlockRowBytes(span.format, K);
    row += span.rows;
  }
  if (row != N) {
    return absl::InvalidArgumentError(absl::StrCat("the block spans hold ", row, " rows; the weight has ", N));
  }
  auto data = UploadBytes(static_cast<const uint8_t*>(stored.data), bytes);
  if (!data.ok()) return data.status();
  w->data = std::move(*data);
  return std::unique_ptr<Weight>(std::move(w));
}

absl::StatusOr<Buffer> CudaBackend::UploadBytes(const uint8_t* bytes, int64_t size) {
  const int64_t words = (size + 3) / 4;
  std::vector<uint8_t> padded(static_cast<size_t>(words) * 4);
  std::copy_n(bytes, size, padded.data());
  auto data = Allocate(DType::kI32, 1, words);
  if (!data.ok()) return data.status();
  FLOVER_RETURN_IF_ERROR(Upload(padded.data(), data->tensor()));
  FLOVER_RETURN_IF_ERROR(Synchronize());  // `padded` must outlive the copy
  return data;
}

absl::Status CudaBackend::PrepareLinear(const Weight& weight, int max_rows, bool has_bias,
                                        Epilogue epilogue) {
  FLOVER_RETURN_IF_ERROR(Activate());
  if (const auto* b = dynamic_cast<const CudaBlockWeight*>(&weight); b != nullptr) {
    // Nothing to pick: our block kernel runs every such weight.
    std::string formats;
    for (const CudaBlockWeight::Span& span : b->spans) {
      const char* name = InfoOf(span.format).name;
      if (formats.find(name) == std::string::npos) absl::StrAppend(&formats, formats.empty() ? "" : "+", name);
    }
    block_plans_.insert(absl::StrCat("[", b->n(), ", ", b->k(), "] ", formats,
                                     " blocks: our block kernel (one warp per output)"));
    return absl::OkStatus();
  }
  const auto& w = static_cast<const CudaWeight&>(weight);
  FLOVER_RETURN_IF_ERROR(gemm_->Prepare(w.n(), w.k(), w.dtype(), has_bias));
  if (epilogue == Epilogue::kBiasGelu) {
    auto s = Scratch(kGemmOutput, size_t(max_rows) * w.n() * sizeof(float));
    if (!s.ok()) return s.status();
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Embed(const Tensor& tokens, const Tensor& positions,
                                const Tensor& wte_rows, int vocab_begin, const Tensor* wpe,
                                const Tensor& out) {
  // Positions must be below wpe's rows: the model checks them before they
  // go up (this side cannot read device memory).
  FLOVER_RETURN_IF_ERROR(CheckEmbedArgs(tokens, positions, wte_rows, wpe, out));
  const int64_t T = tokens.cols, C = wte_rows.cols;
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchEmbed(tokens.as<int32_t>(), positions.as<int32_t>(), static_cast<int>(T),
                                wte_rows.as<float>(), vocab_begin, static_cast<int>(wte_rows.rows),
                                wpe != nullptr ? wpe->as<float>() : nullptr, static_cast<int>(C),
                                out.as<float>(), stream_),
                    "Embed");
}

namespace {

// The rows as stored, on the device (whole 4-byte words).
class CudaBlockRows final : public BlockRows {
 public:
  CudaBlockRows(BlockFormat format, int64_t rows, int cols, Buffer data)
      : format_(format), rows_(rows), cols_(cols), data_(std::move(data)) {}
  BlockFormat format() const override { return format_; }
  int64_t rows() const override { return rows_; }
  int cols() const override { return cols_; }
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_.tensor().data); }

 private:
  BlockFormat format_;
  int64_t rows_;
  int cols_;
  Buffer data_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BlockRows>> CudaBackend::PrepareBlockRows(BlockFormat format,
                                                                         const uint8_t* bytes,
                                                                         int64_t rows, int cols) {
  FLOVER_RETURN_IF_ERROR(CheckBlockRowsArgs(format, bytes, rows, cols));
  if (cols % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("EmbedBlocks: rows of ", cols, " values are not whole 32-value sub-blocks"));
  }
  auto data = UploadBytes(bytes, rows * BlockRowBytes(format, cols));
  if (!data.ok()) return data.status();
  return std::unique_ptr<BlockRows>(new CudaBlockRows(format, rows, cols, std::move(*data)));
}

absl::Status CudaBackend::EmbedBlocks(const Tensor& tokens, const Tensor& positions,
                                      const BlockRows& table, int vocab_begin, float scale,
                                      const Tensor* wpe, const Tensor& out) {
  // Positions must be below wpe's rows: the model checks them before they
  // go up (this side cannot read device memory).
  FLOVER_RETURN_IF_ERROR(CheckEmbedBlocksArgs(tokens, positions, table, wpe, out));
  const auto* rows = dynamic_cast<const CudaBlockRows*>(&table);
  if (rows == nullptr) return absl::InvalidArgumentError("EmbedBlocks: rows prepared by another backend");
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchEmbedBlocks(table.format(), tokens.as<int32_t>(), positions.as<int32_t>(),
                                      static_cast<int>(tokens.cols), rows->data(), table.rows(),
                                      vocab_begin, scale, wpe != nullptr ? wpe->as<float>() : nullptr,
                                      table.cols(), out.as<float>(), stream_),
                    "EmbedBlocks");
}

absl::Status CudaBackend::ArgmaxRows(const Tensor& x, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckArgmaxRowsArgs(x, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchArgmaxRows(x.as<float>(), static_cast<int>(x.rows), x.cols,
                                     out.as<int32_t>(), stream_),
                    "ArgmaxRows");
}

absl::Status CudaBackend::Add(const Tensor& x, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckAddArgs(x, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchAdd(x.as<float>(), out.elements(), out.as<float>(), stream_), "Add");
}

absl::Status CudaBackend::Scale(const Tensor& x, float s) {
  FLOVER_RETURN_IF_ERROR(CheckScaleArgs(x, s));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchScale(x.as<float>(), x.elements(), s, stream_), "Scale");
}

absl::Status CudaBackend::Copy(const Tensor& src, const Tensor& dst) {
  FLOVER_RETURN_IF_ERROR(CheckCopyArgs(src, dst));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream_), "Copy");
}

absl::Status CudaBackend::LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    float eps, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckLayerNormArgs(x, gamma, beta, out, activation_dtype()));
  const int64_t T = x.rows, C = x.cols;
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchLayerNorm(x.as<float>(), static_cast<int>(T), static_cast<int>(C),
                                    gamma.as<float>(), beta.as<float>(), eps, out.data, out.dtype,
                                    stream_),
                    "LayerNorm");
}

absl::Status CudaBackend::RmsNorm(const Tensor& x, const Tensor& gamma, float eps,
                                  const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckRmsNormArgs(x, gamma, out, activation_dtype()));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchRmsNorm(x.as<float>(), static_cast<int>(x.rows), static_cast<int>(x.cols),
                                  gamma.as<float>(), eps, out.data, out.dtype, stream_),
                    "RmsNorm");
}

absl::Status CudaBackend::Rope(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                               const RopeParams& p) {
  FLOVER_RETURN_IF_ERROR(CheckRopeArgs(qkv, positions, inv_freq, p));
  FLOVER_RETURN_IF_ERROR(Activate());
  const int mrope[4] = {p.mrope_t, p.mrope_h, p.mrope_w, p.mrope_interleaved ? 1 : 0};
  return CudaStatus(LaunchRope(qkv.as<float>(), positions.as<int32_t>(), inv_freq.as<float>(),
                               static_cast<int>(qkv.rows), p.q_heads, p.kv_heads, p.head_dim,
                               static_cast<int>(inv_freq.cols),
                               p.style == RopeStyle::kInterleaved, p.scale,
                               positions.rows == 3 ? mrope : nullptr, stream_),
                    "Rope");
}

absl::Status CudaBackend::Glu(const Tensor& gate_up, GluKind kind, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGluArgs(gate_up, kind, out, activation_dtype()));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchGlu(gate_up.as<float>(), static_cast<int>(out.rows),
                              static_cast<int>(out.cols), kind, out.data,
                              out.dtype, stream_),
                    "Glu");
}

absl::Status CudaBackend::Sigmoid(const Tensor& x) {
  FLOVER_RETURN_IF_ERROR(CheckSigmoidArgs(x));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchSigmoid(x.as<float>(), x.rows * x.cols, stream_), "Sigmoid");
}

absl::Status CudaBackend::SoftCap(const Tensor& x, float cap) {
  FLOVER_RETURN_IF_ERROR(CheckSoftCapArgs(x, cap));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchSoftCap(x.as<float>(), x.rows * x.cols, cap, stream_), "SoftCap");
}

absl::Status CudaBackend::GroupRmsNorm(const Tensor& x, int first, int groups, const Tensor& gamma,
                                       float eps) {
  FLOVER_RETURN_IF_ERROR(CheckGroupRmsNormArgs(x, first, groups, gamma));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchGroupRmsNorm(x.as<float>(), static_cast<int>(x.rows), static_cast<int>(x.cols), first,
                                       groups, static_cast<int>(gamma.cols), gamma.as<float>(), eps, stream_),
                    "GroupRmsNorm");
}

absl::Status CudaBackend::Route(const Tensor& logits, const RouterParams& p, const Tensor& ids,
                                const Tensor& weights) {
  FLOVER_RETURN_IF_ERROR(CheckRouteArgs(logits, p, ids, weights));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchRoute(logits.as<float>(), static_cast<int>(logits.rows), static_cast<int>(logits.cols), p,
                                ids.as<int32_t>(), weights.as<float>(), stream_),
                    "Route");
}

namespace {

// The aligned sizes of one work space's parts, each part 256-byte aligned.
int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Routes per tile for the device grouping: the few-row GEMM's 16, 32 or 64
// rows, the larger where the experts average more rows (a tile reads its
// expert's weights once). A row's result does not depend on it.
int ExpertTileRows(int64_t R, int E) {
  const int64_t per_expert = R / E;
  return per_expert >= 48 ? 64 : per_expert >= 24 ? 32 : 16;
}

}  // namespace

bool CudaBackend::GroupsOnDevice(absl::Span<const Weight* const> experts) const {
  if (experts_on_host_ || experts.empty()) return false;
  const auto* first = dynamic_cast<const CudaWeight*>(experts[0]);
  if (first == nullptr) return false;
  for (const Weight* w : experts) {
    const auto* dense = dynamic_cast<const CudaWeight*>(w);
    if (dense == nullptr || dense->dtype() != first->dtype() || !MmaGemmTakes(dense->dtype(), dense->k()) ||
        reinterpret_cast<uintptr_t>(dense->data()) % 16 != 0) {
      return false;
    }
  }
  return true;
}

bool CudaBackend::LinearByIdWaits(absl::Span<const Weight* const> experts) const {
  return !GroupsOnDevice(experts);
}

absl::StatusOr<const void* const*> CudaBackend::ExpertTable(absl::Span<const Weight* const> experts) {
  ExpertTableEntry& entry = expert_tables_[experts.data()];
  const auto data_of = [](const Weight* w) { return static_cast<const CudaWeight*>(w)->data(); };
  if (entry.device != nullptr &&
      std::equal(entry.pointers.begin(), entry.pointers.end(), experts.begin(), experts.end(),
                 [&](const void* kept, const Weight* w) { return kept == data_of(w); })) {
    return static_cast<const void* const*>(entry.device);  // every call but a span's first: nothing allocated
  }
  std::vector<const void*> pointers;
  for (const Weight* w : experts) pointers.push_back(data_of(w));
  if (capturing_) return absl::FailedPreconditionError("an experts' table would be made while recording a step");
  cudaFree(entry.device);  // waits for the device: nothing reads the old table after
  entry.device = nullptr;
  entry.pointers.clear();
  const size_t bytes = pointers.size() * sizeof(void*);
  if (cudaError_t e = cudaMalloc(&entry.device, bytes); e != cudaSuccess) {
    cudaGetLastError();
    entry.device = nullptr;
    return CudaStatus(e, "the experts' table");
  }
  FLOVER_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(entry.device, pointers.data(), bytes, cudaMemcpyHostToDevice), "the experts' table"));
  entry.pointers = std::move(pointers);
  return static_cast<const void* const*>(entry.device);
}

// Grouped on the device (GroupsOnDevice): the ids stay there; one block
// groups the routes, the rows are gathered in grouped order (rounded to the
// weights' type first where x is f32), one launch runs every expert's tiles
// on the mma GEMM, and the results are scattered to their routes. Nothing
// waits for the host, so such steps are recorded. Ids out of range give
// zero rows (they cannot be refused without coming down; Route writes none).
//
// Otherwise the grouping is worked out on the host (the ids come down,
// which waits for the stream), so a step with such experts is not recorded
// as a graph; the rows move by index on the device.
//
// Either way the index and the grouped rows live in work space that
// outlasts the call (kExpertRows), so nothing is allocated or freed per call
// and the experts' GEMMs need not be waited for here.
absl::Status CudaBackend::LinearById(const Tensor& x, absl::Span<const Weight* const> experts, const Tensor* bias,
                                     const Tensor& ids, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckLinearByIdArgs(x, experts, bias, ids, out, activation_dtype(), nullptr));
  const int64_t R = ids.rows * ids.cols, k = ids.cols, K = x.cols, N = out.cols;
  if (R == 0) return absl::OkStatus();
  if (GroupsOnDevice(experts)) return LinearByIdOnDevice(x, experts, bias, ids, out);
  std::vector<int32_t> host_ids(R);
  FLOVER_RETURN_IF_ERROR(Download(ids, host_ids.data()));
  FLOVER_RETURN_IF_ERROR(CheckLinearByIdArgs(x, experts, bias, ids, out, activation_dtype(), host_ids.data()));
  const ExpertGroups g = GroupByExpert(host_ids.data(), R, static_cast<int>(experts.size()));
  // Row 0: each grouped row's source row of x; row 1: its route (where its
  // result goes).
  std::vector<int32_t> index(2 * R);
  for (int64_t i = 0; i < R; ++i) {
    index[i] = x.rows == R ? g.routes[i] : static_cast<int32_t>(g.routes[i] / k);
    index[R + i] = g.routes[i];
  }
  // One work space: the index, the gathered rows of x, the experts' results.
  const int64_t index_bytes = Aligned(2 * R * int64_t{sizeof(int32_t)});
  const int64_t in_bytes = Aligned(R * K * DTypeBytes(x.dtype));
  const int64_t res_bytes = Aligned(R * N * int64_t{sizeof(float)});
  FLOVER_ASSIGN_OR_RETURN(void* space, Scratch(kExpertRows, size_t(index_bytes + in_bytes + res_bytes)));
  char* base = static_cast<char*>(space);
  const Tensor index_dev{base, DType::kI32, 2, R};
  const Tensor in{base + index_bytes, x.dtype, R, K};
  const Tensor res{base + index_bytes + in_bytes, DType::kF32, R, N};
  FLOVER_RETURN_IF_ERROR(Upload(index.data(), index_dev));  // staged before it returns
  const int32_t* sources = index_dev.as<int32_t>();
  FLOVER_RETURN_IF_ERROR(CudaStatus(LaunchCopyRows(x.data, sources, in.data, nullptr, static_cast<int>(R),
                                                   K * DTypeBytes(x.dtype), stream_),
                                    "LinearById gather"));
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t b = g.begin[e], n = g.begin[e + 1] - b;
    if (n == 0) continue;
    const Tensor expert_bias = bias != nullptr ? bias->Rows(e, 1) : Tensor{};
    FLOVER_RETURN_IF_ERROR(Linear(in.Rows(b, n), *experts[e], bias != nullptr ? &expert_bias : nullptr,
                                  Epilogue::kBias, res.Rows(b, n)));
  }
  return CudaStatus(LaunchCopyRows(res.data, nullptr, out.data, sources + R, static_cast<int>(R),
                                   N * sizeof(float), stream_),
                    "LinearById scatter");
}

absl::Status CudaBackend::LinearByIdOnDevice(const Tensor& x, absl::Span<const Weight* const> experts,
                                             const Tensor* bias, const Tensor& ids, const Tensor& out) {
  const int64_t R = ids.rows * ids.cols, k = ids.cols, K = x.cols, N = out.cols;
  const int E = static_cast<int>(experts.size());
  const DType wtype = static_cast<const CudaWeight*>(experts[0])->dtype();
  FLOVER_RETURN_IF_ERROR(Activate());
  FLOVER_ASSIGN_OR_RETURN(const void* const* table, ExpertTable(experts));
  const int tile_rows = ExpertTileRows(R, E);
  const int64_t tile_bound = ExpertTileBound(R, E, tile_rows);
  // One work space: the routes and sources, the tiles, x rounded to the
  // weights' type (where it is not already), the gathered rows, the results.
  const bool convert = x.dtype != wtype;
  const int64_t index_bytes = Aligned(2 * R * int64_t{sizeof(int32_t)});
  const int64_t tile_bytes = Aligned(tile_bound * int64_t{sizeof(ExpertTile)});
  const int64_t converted_bytes = convert ? Aligned(x.rows * K * DTypeBytes(wtype)) : 0;
  const int64_t in_bytes = Aligned(R * K * DTypeBytes(wtype));
  const int64_t res_bytes = Aligned(R * N * int64_t{sizeof(float)});
  FLOVER_ASSIGN_OR_RETURN(
      void* space, Scratch(kExpertRows, size_t(index_bytes + tile_bytes + converted_bytes + in_bytes + res_bytes)));
  char* base = static_cast<char*>(space);
  int32_t* sources = reinterpret_cast<int32_t*>(base);
  int32_t* routes = sources + R;
  auto* tiles = reinterpret_cast<ExpertTile*>(base + index_bytes);
  void* converted = base + index_bytes + tile_bytes;
  void* in = base + index_bytes + tile_bytes + converted_bytes;
  float* res = reinterpret_cast<float*>(base + index_bytes + tile_bytes + converted_bytes + in_bytes);
  FLOVER_RETURN_IF_ERROR(CudaStatus(
      LaunchGroupExperts(ids.as<int32_t>(), static_cast<int>(R), E, static_cast<int>(k), x.rows != R, tile_rows,
                         tile_bound, sources, routes, tiles, stream_),
      "LinearById grouping"));
  const void* rows = x.data;
  if (convert) {  // f32 inputs rounded to the weights' type, as Linear rounds them
    FLOVER_RETURN_IF_ERROR(CudaStatus(LaunchConvert(x.as<float>(), x.rows * K, converted, wtype, stream_),
                                      "LinearById input"));
    rows = converted;
  }
  FLOVER_RETURN_IF_ERROR(CudaStatus(
      LaunchCopyRows(rows, sources, in, nullptr, static_cast<int>(R), K * DTypeBytes(wtype), stream_),
      "LinearById gather"));
  FLOVER_RETURN_IF_ERROR(CudaStatus(LaunchMmaGemmGrouped(in, table, E, wtype, tiles, tile_bound, tile_rows,
                                                         bias != nullptr ? bias->as<float>() : nullptr,
                                                         static_cast<int>(N), static_cast<int>(K), res, stream_),
                                    "LinearById experts"));
  return CudaStatus(LaunchCopyRows(res, nullptr, out.data, routes, static_cast<int>(R), N * sizeof(float), stream_),
                    "LinearById scatter");
}

absl::Status CudaBackend::WeightedRowSum(const Tensor& y, const Tensor& weights, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckWeightedRowSumArgs(y, weights, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchWeightedRowSum(y.as<float>(), weights.as<float>(), static_cast<int>(out.rows),
                                         static_cast<int>(weights.cols), static_cast<int>(out.cols),
                                         out.as<float>(), stream_),
                    "WeightedRowSum");
}

absl::Status CudaBackend::Linear(const Tensor& x, const Weight& weight, const Tensor* bias,
                                 Epilogue epilogue, const Tensor& out) {
  if (const auto* blocks = dynamic_cast<const CudaBlockWeight*>(&weight)) {
    FLOVER_RETURN_IF_ERROR(CheckLinearArgs(x, weight, bias, epilogue, out, DType::kF32, activation_dtype()));
    if (x.dtype != DType::kF32 || out.dtype != DType::kF32) {
      return absl::InvalidArgumentError("Linear on quantized blocks takes and gives f32");
    }
    const int M = static_cast<int>(x.rows);
    if (M == 0) return absl::OkStatus();
    FLOVER_RETURN_IF_ERROR(Activate());
    const float* b = bias != nullptr ? bias->as<float>() : nullptr;
    const auto* base = static_cast<const uint8_t*>(blocks->data.tensor().data);
    for (const CudaBlockWeight::Span& span : blocks->spans) {
      FLOVER_RETURN_IF_ERROR(CudaStatus(
          LaunchBlockLinear(span.format, x.as<float>(), M, blocks->k(), base + span.offset, span.rows,
                            span.row_begin, blocks->n(), b, epilogue == Epilogue::kBiasGelu,
                            epilogue == Epilogue::kBiasResidual, out.as<float>(), stream_),
          "Linear on quantized blocks"));
    }
    return absl::OkStatus();
  }
  const auto& w = static_cast<const CudaWeight&>(weight);
  const int K = w.k(), N = w.n();
  FLOVER_RETURN_IF_ERROR(
      CheckLinearArgs(x, weight, bias, epilogue, out, w.dtype(), activation_dtype()));
  const int M = static_cast<int>(x.rows);
  if (M == 0) return absl::OkStatus();
  FLOVER_RETURN_IF_ERROR(Activate());
  const void* in = x.data;
  if (x.dtype != w.dtype()) {  // f32 inputs rounded to the weights' type, as the CPU rounds them
    auto s = Scratch(kConvertedInput, size_t(M) * K * DTypeBytes(w.dtype()));
    if (!s.ok()) return s.status();
    FLOVER_RETURN_IF_ERROR(CudaStatus(
        LaunchConvert(x.as<float>(), int64_t{M} * K, *s, w.dtype(), stream_), "Linear input"));
    in = *s;
  }
  const float* b = bias != nullptr ? bias->as<float>() : nullptr;
  switch (epilogue) {
    case Epilogue::kBias:
      return gemm_->Run(in, M, w.data(), N, K, w.dtype(), b, false, out.as<float>());
    case Epilogue::kBiasResidual:
      return gemm_->Run(in, M, w.data(), N, K, w.dtype(), b, true, out.as<float>());
    case Epilogue::kBiasGelu: {
      float* pre = out.as<float>();
      if (out.dtype != DType::kF32) {
        auto s = Scratch(kGemmOutput, size_t(M) * N * sizeof(float));
        if (!s.ok()) return s.status();
        pre = static_cast<float*>(*s);
      }
      FLOVER_RETURN_IF_ERROR(gemm_->Run(in, M, w.data(), N, K, w.dtype(), b, false, pre));
      return CudaStatus(LaunchGelu(pre, int64_t{M} * N, out.data, out.dtype, stream_), "gelu");
    }
  }
  return absl::InvalidArgumentError("Linear: unknown epilogue");
}

absl::Status CudaBackend::AppendKv(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv) {
  FLOVER_RETURN_IF_ERROR(CheckAppendKvArgs(qkv, seqs, kv, kv_));
  if (seqs.num_rows == 0) return absl::OkStatus();
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchKvAppend(qkv.as<float>(), seqs.device.as<int32_t>(),
                                   seqs.block_ids_device.as<int32_t>(), seqs.num_seqs,
                                   seqs.num_rows, QueryHeads(qkv, kv), kv, stream_),
                    "KV append");
}

absl::Status CudaBackend::EncoderAttention(const Tensor& qkv, absl::Span<const int32_t> group_ends, int heads,
                                           float scale, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckEncoderAttentionArgs(qkv, group_ends, heads, scale, out));
  const int T = static_cast<int>(qkv.rows), D = static_cast<int>(qkv.cols / (3 * heads));
  if (D > EncoderAttentionMaxHeadDim()) {
    return absl::InvalidArgumentError(absl::StrCat("EncoderAttention: head dim ", D, " is above the CUDA kernel's ",
                                                   EncoderAttentionMaxHeadDim()));
  }
  if (T == 0) return absl::OkStatus();
  FLOVER_RETURN_IF_ERROR(Activate());
  // The group ends go up into the attention's work space (stream-ordered:
  // the kernel reads them before any later op can write there).
  const int64_t groups = static_cast<int64_t>(group_ends.size());
  FLOVER_ASSIGN_OR_RETURN(void* space, Scratch(kAttentionWork, size_t(groups) * sizeof(int32_t)));
  const Tensor ends{space, DType::kI32, 1, groups};
  FLOVER_RETURN_IF_ERROR(Upload(group_ends.data(), ends));
  const float s = scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(D));
  return CudaStatus(LaunchEncoderAttention(qkv.as<float>(), ends.as<int32_t>(), static_cast<int>(groups), T, heads,
                                           D, s, out.as<float>(), stream_),
                    "EncoderAttention");
}

absl::Status CudaBackend::Attention(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                                    const AttentionParams& p, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckAttentionArgs(qkv, seqs, kv, p, out, kv_, activation_dtype()));
  if (kv.head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: head dim ", kv.head_dim,
                                                   " is above the CUDA kernel's ", kMaxHeadDim));
  }
  if (seqs.num_rows == 0) return absl::OkStatus();
  FLOVER_RETURN_IF_ERROR(Activate());
  const int q_heads = QueryHeads(qkv, kv, p.q_only);
  float* work = nullptr;
  const int64_t floats =
      AttentionWorkspaceFloats(seqs.num_rows, q_heads, kv.head_dim, seqs.max_context);
  if (floats > 0) {
    auto s = Scratch(kAttentionWork, size_t(floats) * sizeof(float));
    if (!s.ok()) return s.status();
    work = static_cast<float*>(*s);
  }
  return CudaStatus(LaunchAttention(qkv.as<float>(), seqs.device.as<int32_t>(),
                                    seqs.block_ids_device.as<int32_t>(),
                                    seqs.horizon != nullptr ? seqs.horizon_device.as<int32_t>() : nullptr, seqs.num_seqs,
                                    seqs.num_rows, seqs.max_context, q_heads, kv, p, out.data,
                                    out.dtype, work, stream_),
                    "Attention");
}

absl::Status CudaBackend::Gate(const Tensor& x, const Tensor& gate, GateKind act, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGateArgs(x, gate, act, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchGate(x.as<float>(), gate.as<float>(), act, out.as<float>(), x.rows * x.cols, stream_),
                    "Gate");
}

absl::Status CudaBackend::CausalConv(const Tensor& x, const SeqTable& seqs, const StateTable& states,
                                     const StateLayer& layer, const Tensor& w, const Tensor* bias,
                                     ConvActivation act, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckCausalConvArgs(x, seqs, states, layer, w, bias, act, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchCausalConv(x.as<float>(), seqs.device.as<int32_t>(), states.device.as<int32_t>(),
                                     seqs.num_seqs, x.cols, static_cast<int>(w.cols), w.as<float>(),
                                     bias != nullptr ? bias->as<float>() : nullptr, act == ConvActivation::kSilu, layer.conv, layer.conv_elems, out.as<float>(),
                                     stream_),
                    "CausalConv");
}

absl::Status CudaBackend::GatedDeltaRule(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& decay_a,
                                         const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                         const StateLayer& layer, const DeltaRuleParams& p, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGatedDeltaRuleArgs(qkv, b, a, decay_a, dt_bias, seqs, states, layer, p, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchGatedDeltaRule(qkv.as<float>(), qkv.cols, b.as<float>(), a.as<float>(),
                                         decay_a.as<float>(), dt_bias.as<float>(), seqs.device.as<int32_t>(),
                                         states.device.as<int32_t>(), seqs.num_seqs, p, layer.scan,
                                         layer.scan_elems, out.as<float>(), out.cols, stream_),
                    "GatedDeltaRule");
}

absl::Status CudaBackend::SelectiveScan(const Tensor& xbc, const Tensor& dt, const Tensor& a, const Tensor& d,
                                        const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                        const StateLayer& layer, const ScanParams& p, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckSelectiveScanArgs(xbc, dt, a, d, dt_bias, seqs, states, layer, p, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchSelectiveScan(xbc.as<float>(), xbc.cols, dt.as<float>(), a.as<float>(), d.as<float>(),
                                        dt_bias.as<float>(), seqs.device.as<int32_t>(), states.device.as<int32_t>(),
                                        seqs.num_seqs, p, layer.scan, layer.scan_elems, out.as<float>(), out.cols,
                                        stream_),
                    "SelectiveScan");
}

absl::Status CudaBackend::GatherLastRows(const Tensor& x, const SeqTable& seqs, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGatherLastRowsArgs(x, seqs, out));
  FLOVER_RETURN_IF_ERROR(Activate());
  return CudaStatus(LaunchGatherLastRows(x.as<float>(), seqs.device.as<int32_t>(), seqs.num_seqs,
                                         static_cast<int>(x.cols), out.as<float>(), stream_),
                    "GatherLastRows");
}

absl::StatusOr<double> CudaBackend::GemmTflops(int M, int N, int K, MatmulDtype dtype) {
  FLOVER_RETURN_IF_ERROR(Activate());
  return gemm_->MeasureLibraryTflops(M, N, K, ToDType(dtype));
}

std::vector<std::string> CudaBackend::GemmPlans() const {
  std::vector<std::string> plans = gemm_->DescribePlans();
  plans.insert(plans.end(), block_plans_.begin(), block_plans_.end());
  return plans;
}

absl::StatusOr<double> CudaBackend::CopyGBs(int64_t bytes) {
  FLOVER_RETURN_IF_ERROR(Activate());
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(a);
    return absl::ResourceExhaustedError("no device memory for the copy roofline");
  }
  cudaMemsetAsync(a, 0, bytes, stream_);
  auto seconds = SecondsPerCall(stream_, 10, [&] {
    return CudaStatus(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
  });
  cudaFree(a);
  cudaFree(b);
  if (!seconds.ok()) return seconds.status();
  return double(bytes) / *seconds / 1e9;
}

}  // namespace flover::kernels::cuda
