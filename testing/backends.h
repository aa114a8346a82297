// Backends and models for tests, over every device this build and host have.
#ifndef FLOVER_ENGINE_TESTING_BACKENDS_H_
#define FLOVER_ENGINE_TESTING_BACKENDS_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/causal_lm.h"
#include "model/kv_cache.h"
#include "model/loaded_model.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "testing/required_devices.h"

namespace flover::testing {

// The value, or the test binary stops with the status (for set-up that
// cannot fail unless something is badly wrong).
template <typename T>
T ValueOrDie(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, v.status().ToString().c_str());
    std::abort();
  }
  return std::move(*v);
}

// The backend for `device` ("cpu", "cuda"), or null with `*skip` set when
// this build or host cannot run it: no CUDA module, no GPU, a dtype the CPU
// has no fast kernel for. Any other error fails the test, and so does any
// error at all for a device in FLOVER_REQUIRE_DEVICES.
inline std::unique_ptr<kernels::Backend> BackendForTest(
    const std::string& device, std::string* skip,
    kernels::MatmulDtype matmul = kernels::MatmulDtype::kF32,
    kernels::KvFormat kv = kernels::KvDtype::kF32, bool record_steps = true) {
  kernels::BackendOptions options;
  options.device = device;
  options.matmul = matmul;
  options.kv = kv;
  options.record_steps = record_steps;
  auto backend = kernels::CreateBackend(options);
  if (backend.ok()) return std::move(*backend);
  const absl::StatusCode code = backend.status().code();
  // --dtype= or --kv_dtype=: a format the device does not offer.
  const bool unsupported_dtype = backend.status().message().find("dtype=") != std::string::npos;
  if (DeviceRequired(device) && !unsupported_dtype) {
    ADD_FAILURE() << device << " is required here (FLOVER_REQUIRE_DEVICES): " << backend.status();
    *skip = "required device failed";
  } else if (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kFailedPrecondition ||
      code == absl::StatusCode::kUnimplemented) {
    *skip = std::string(backend.status().message());
  } else {
    ADD_FAILURE() << device << ": " << backend.status();
    *skip = "backend failed";
  }
  return nullptr;
}

// Whether this machine's CPU backend runs linear layers in `matmul` (bf16
// needs oneDNN's fast kernels, int8 AVX-512 VNNI): the backend's own answer,
// so a test that starts a server with --dtype knows whether to expect it to
// start, without reaching into the CPU kernels.
inline absl::Status CpuSupports(kernels::MatmulDtype matmul) {
  kernels::BackendOptions options;
  options.matmul = matmul;
  return kernels::CreateBackend(options).status();
}

// A CPU backend that must exist (f32 matmul and KV unless asked otherwise).
inline std::unique_ptr<kernels::Backend> CpuBackend(
    kernels::MatmulDtype matmul = kernels::MatmulDtype::kF32,
    kernels::KvFormat kv = kernels::KvDtype::kF32) {
  kernels::BackendOptions options;
  options.matmul = matmul;
  options.kv = kv;
  return ValueOrDie(kernels::CreateBackend(options), "CPU backend");
}

// `loaded` (its weights copied; this rank's shard with collectives of tp > 1)
// on `backend`, or the binary stops.
inline std::unique_ptr<CausalLm> ModelOn(kernels::Backend& backend, const LoadedModel& loaded,
                                         Collectives* collectives = nullptr) {
  return ValueOrDie(loaded.Instantiate(backend, collectives), "model");
}

// The blocks of sequence `seq` in a cache made by CacheFor(model, n, max_seq).
inline std::vector<int32_t> SeqBlocks(int seq, int max_seq) {
  const int per_seq = KvCacheShape::BlocksFor(max_seq);
  return BlockRange(seq * per_seq, per_seq);
}

// A KV cache for `model` with room for `seqs` sequences of up to `max_seq`
// positions each, or the binary stops. Sequence i's blocks are SeqBlocks(i,
// max_seq): a contiguous range, as a test that runs sequences alone wants;
// its recurrent state (hybrid models) is in slot i.
inline std::unique_ptr<KvCache> CacheFor(const CausalLm& model, int seqs, int max_seq) {
  return ValueOrDie(KvCache::Create(model.backend(),
                                    model.CacheShape(seqs * KvCacheShape::BlocksFor(max_seq), max_seq, seqs)),
                    "KV cache");
}

// Adds sequence `seq` of a CacheFor cache to `batch`: its blocks, and its
// state slot where the cache keeps recurrent state.
inline void AddCachedSequence(ForwardBatch& batch, const KvCache& cache, int seq, int max_seq, int32_t pos,
                              absl::Span<const int32_t> tokens, int32_t logit_rows = 1) {
  batch.AddSequence(SeqBlocks(seq, max_seq), pos, tokens, logit_rows);
  if (cache.shape().state_slots > 0) batch.states.push_back(StateOf(seq, pos));
}


}  // namespace flover::testing

#endif  // FLOVER_ENGINE_TESTING_BACKENDS_H_
