// Two NCCL ranks on one GPU: rank 0 and rank 1 are threads of this process,
// each with its own CUDA backend on cuda:0, joined by an in-process control
// channel (NCCL's unique id travels over it, then rank 0's greedy tokens),
// with NCCL_MULTI_RANK_GPU_ENABLE=1. Checked: all-reduce sums (f32 and bf16,
// bit for bit) and the gather to rank 0 through the real NCCL collectives,
// then a TP=2 decoder against TP=1 on the same GPU, with the bounds of
// model/tp_golden_test (scaled logit error 1e-4 in f32, 1e-2 with bf16
// linear layers and KV cache: only the summation order of the row-split
// layers differs) and the same greedy tokens. An NCCL that refuses two ranks
// on one device (2.28 answers "Duplicate GPU detected", invalid usage) skips
// with its version, FLOVER_REQUIRE_DEVICES or not; a host without a GPU
// skips with the reason, and under FLOVER_REQUIRE_DEVICES=cuda fails.
// Every collective is fenced (FencedCollectives): two ranks share one CUDA
// context, where a cudaFree on one would otherwise wait on the other's
// pending all-reduce.
//
// Never a hang: a rank that fails fails the channel, which wakes the other;
// a rank stuck in NCCL or CUDA past kPhaseLimit fails its test, is left
// behind with everything it uses (never freed), and the cases after it fail
// at once; main() then ends the process without tearing CUDA down.
// On any host: InProcessRanksTest checks that machinery, and the decoder
// case llama_gqa_cpu_f32 runs the same ranks and fences on the CPU with
// host-memory collectives.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "engine/generate.h"
#include "kernels/backend_factory.h"
#include "kernels/collectives.h"
#include "model/model_loader.h"
#include "testing/backends.h"
#include "testing/golden.h"
#include "util/status_macros.h"

namespace flover {
namespace {

constexpr int kRanks = 2;
// How long the ranks of one phase (NCCL set-up, the work, the teardown) may
// take; seconds are expected.
constexpr std::chrono::milliseconds kPhaseLimit = std::chrono::seconds(90);
// After the limit the channel is failed, and the ranks get this long to
// notice before they are left behind.
constexpr std::chrono::milliseconds kGrace = std::chrono::seconds(5);

// A rank thread was left stuck in NCCL or CUDA: later cases fail at once
// (the GPU may hold its kernel forever), and main() exits without teardown.
std::atomic<bool> g_hung{false};
// Why NCCL refused two ranks on one GPU, once it has: later cases skip at once.
std::string g_refused;

// The loaded NCCL's version, as ncclGetVersion reports it; this binary does
// not link NCCL (the CUDA module opens it), so it is looked up the same way.
std::string NcclVersion() {
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return "unknown (libnccl.so.2 does not load)";
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"));
  int code = 0;
  if (get == nullptr || get(&code) != 0) return "unknown (no ncclGetVersion)";
  // NCCL_VERSION(X, Y, Z): X * 10000 + Y * 100 + Z since 2.9, X * 1000 + Y * 100 + Z before.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  return absl::StrFormat("%d.%d.%d (ncclGetVersion %d)", major, minor, code % 100, code);
}

// The control channel between rank threads: Broadcast is a generation
// barrier (the root copies its bytes in, all meet, the others copy them out,
// all meet again so the next broadcast cannot overwrite them). Fail wakes
// every waiter, and every later call fails: no rank waits forever for a
// peer that has given up.
class ThreadChannel {
 public:
  absl::Status Broadcast(int rank, void* data, size_t bytes, int root) {
    std::unique_lock<std::mutex> lock(mu_);
    if (rank == root) {
      const char* p = static_cast<const char*>(data);
      buffer_.assign(p, p + bytes);
    }
    FLOVER_RETURN_IF_ERROR(Arrive(lock));
    if (rank != root) {
      if (buffer_.size() != bytes) {
        FailLocked(absl::StrCat("rank ", rank, " expected ", bytes, " bytes from rank ", root,
                                ", which sent ", buffer_.size()));
        return Failed();
      }
      if (bytes > 0) std::memcpy(data, buffer_.data(), bytes);
    }
    return Arrive(lock);
  }

  void Fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    FailLocked(why);
  }

  // What each rank is doing, for the report of a rank that is stuck.
  void Note(int rank, std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    doing_[rank] = std::move(what);
  }
  std::string Doing(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    return doing_[rank];
  }

 private:
  absl::Status Arrive(std::unique_lock<std::mutex>& lock) {
    if (failed_) return Failed();
    const uint64_t generation = generation_;
    if (++arrived_ == kRanks) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return absl::OkStatus();
    }
    cv_.wait(lock, [&] { return generation_ != generation || failed_; });
    return generation_ != generation ? absl::OkStatus() : Failed();
  }
  void FailLocked(const std::string& why) {
    if (!failed_) why_ = why;
    failed_ = true;
    cv_.notify_all();
  }
  absl::Status Failed() const {
    return absl::UnavailableError(absl::StrCat("control channel failed: ", why_));
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<char> buffer_;
  bool failed_ = false;
  std::string why_;
  std::string doing_[kRanks];
};

// One rank's view of the channel: its own world (rank r of tp = 2, local
// rank r of 2), as mpirun would have placed it.
class RankChannel final : public ControlChannel {
 public:
  RankChannel(ThreadChannel& shared, int rank) : shared_(shared) {
    world_.world_size = kRanks;
    world_.rank = rank;
    world_.tp_size = kRanks;
    world_.tp_rank = rank;
    world_.local_rank = rank;
    world_.local_size = kRanks;
  }
  const WorldConfig& world() const override { return world_; }
  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    return shared_.Broadcast(world_.rank, data, bytes, root);
  }
  // Threads cannot end the job: the peers are woken and fail instead.
  void Abort(int code) override {
    shared_.Fail(absl::StrCat("rank ", world_.rank, " aborted with code ", code));
  }
  absl::Status Barrier() { return shared_.Broadcast(world_.rank, nullptr, 0, 0); }

 private:
  ThreadChannel& shared_;
  WorldConfig world_;
};

// One rank's NCCL collectives, each fenced: the ranks meet on the host
// before it is enqueued, and after it, once it has run on their own streams.
// Two ranks on one GPU share its context, where cudaFree (a KV cache going,
// a workspace growing) waits for every stream: a rank freeing while the
// other's all-reduce is enqueued, waiting for a counterpart this rank has
// not enqueued yet, would wait forever. Fenced, no NCCL kernel is pending
// between collectives. (Inside a gather rank 0 may allocate its landing
// space while rank 1's send is pending; every test gathers its largest
// first, so that happens at most once, from an empty buffer, which frees
// nothing.)
class FencedCollectives final : public Collectives {
 public:
  FencedCollectives(Collectives& nccl, kernels::Backend& backend, RankChannel& channel)
      : nccl_(nccl), backend_(backend), channel_(channel) {}
  const WorldConfig& world() const override { return nccl_.world(); }
  absl::Status AllReduceSum(const kernels::Tensor& data) override {
    return Fenced([&] { return nccl_.AllReduceSum(data); });
  }
  absl::Status GatherToLeader(const kernels::Tensor& local, std::vector<float>* out) override {
    return Fenced([&] { return nccl_.GatherToLeader(local, out); });
  }

 private:
  template <typename Op>
  absl::Status Fenced(Op op) {
    FLOVER_RETURN_IF_ERROR(channel_.Barrier());
    FLOVER_RETURN_IF_ERROR(op());
    FLOVER_RETURN_IF_ERROR(backend_.Synchronize());
    return channel_.Barrier();
  }

  Collectives& nccl_;
  kernels::Backend& backend_;
  RankChannel& channel_;
};

// The CPU's stand-in for NCCL: the same ranks and channel, with the
// reductions done in host memory over the channel (f32, as MPI's are), so
// the decoder case runs on any host. Each rank broadcasts its part in turn;
// every rank adds them in rank order, so all get the same bits.
class HostCollectives final : public Collectives {
 public:
  explicit HostCollectives(RankChannel& channel) : channel_(channel) {}
  const WorldConfig& world() const override { return channel_.world(); }
  absl::Status AllReduceSum(const kernels::Tensor& data) override {
    if (data.dtype != kernels::DType::kF32) {
      return absl::InvalidArgumentError("host all-reduce: f32 only");
    }
    const size_t n = static_cast<size_t>(data.elements());
    std::vector<float> sum(n, 0.0f), part(n);
    for (int root = 0; root < kRanks; ++root) {
      if (root == channel_.world().rank) std::memcpy(part.data(), data.data, n * sizeof(float));
      FLOVER_RETURN_IF_ERROR(channel_.Broadcast(part.data(), n * sizeof(float), root));
      for (size_t i = 0; i < n; ++i) sum[i] += part[i];
    }
    std::memcpy(data.data, sum.data(), n * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status GatherToLeader(const kernels::Tensor& local, std::vector<float>* out) override {
    if (local.dtype != kernels::DType::kF32) {
      return absl::InvalidArgumentError("host gather: f32 only");
    }
    out->clear();
    for (int root = 0; root < kRanks; ++root) {
      int64_t n = root == channel_.world().rank ? local.elements() : 0;
      FLOVER_RETURN_IF_ERROR(channel_.Broadcast(&n, sizeof(n), root));
      std::vector<float> part(static_cast<size_t>(n));
      if (root == channel_.world().rank && n > 0) {
        std::memcpy(part.data(), local.data, part.size() * sizeof(float));
      }
      FLOVER_RETURN_IF_ERROR(channel_.Broadcast(part.data(), part.size() * sizeof(float), root));
      out->insert(out->end(), part.begin(), part.end());
    }
    return absl::OkStatus();
  }

 private:
  RankChannel& channel_;
};

// Runs body(rank) for every rank, each on its own thread, and returns their
// statuses. A rank that fails fails the channel, so its peer is not left
// waiting there. A rank still running after `limit` (and `grace` after the
// channel is failed) is stuck where nothing can wake it (an NCCL kernel
// whose peer never came, a device-wide wait): its status says what it was
// doing, *hung is set, and its thread is left behind, so whatever it uses
// must never be freed.
std::vector<absl::Status> RunOnRanks(ThreadChannel& channel, std::function<absl::Status(int)> body,
                                     bool* hung, std::chrono::milliseconds limit = kPhaseLimit,
                                     std::chrono::milliseconds grace = kGrace) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    int finished = 0;
    std::vector<std::optional<absl::Status>> status =
        std::vector<std::optional<absl::Status>>(kRanks);
  };
  auto done = std::make_shared<Done>();
  auto fn = std::make_shared<std::function<absl::Status(int)>>(std::move(body));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([done, fn, &channel, r] {
      absl::Status st = (*fn)(r);
      if (!st.ok()) channel.Fail(absl::StrCat("rank ", r, " failed: ", st.ToString()));
      std::lock_guard<std::mutex> lock(done->mu);
      done->status[r] = std::move(st);
      ++done->finished;
      done->cv.notify_all();
    });
  }
  auto all = [&] { return done->finished == kRanks; };
  std::unique_lock<std::mutex> lock(done->mu);
  if (!done->cv.wait_for(lock, limit, all)) {
    lock.unlock();
    channel.Fail(
        absl::StrCat("a rank ran past the test's limit of ", limit.count() / 1000.0, " s"));
    lock.lock();
    done->cv.wait_for(lock, grace, all);
  }
  std::vector<absl::Status> out;
  std::vector<bool> finished;
  for (int r = 0; r < kRanks; ++r) {
    finished.push_back(done->status[r].has_value());
    out.push_back(finished.back() ? *done->status[r] : absl::OkStatus());
  }
  lock.unlock();
  *hung = false;
  for (int r = 0; r < kRanks; ++r) {
    if (finished[r]) {
      threads[r].join();
      continue;
    }
    *hung = true;
    threads[r].detach();
    out[r] = absl::DeadlineExceededError(
        absl::StrCat("rank ", r, " still running after ", (limit + grace).count() / 1000.0,
                     " s (stuck in NCCL or CUDA?), last at: ", channel.Doing(r)));
  }
  return out;
}

std::string Describe(const std::vector<absl::Status>& status) {
  std::string s;
  for (int r = 0; r < kRanks; ++r) {
    absl::StrAppend(&s, r ? "; " : "", "rank ", r, ": ", status[r].ToString());
  }
  return s;
}

bool AllOk(const std::vector<absl::Status>& status) {
  return std::all_of(status.begin(), status.end(), [](const absl::Status& s) { return s.ok(); });
}

// ---------------------------------------------------------------------------
// The machinery itself, on any host.

TEST(InProcessRanksTest, BroadcastsFromEitherRootInOrder) {
  ThreadChannel channel;
  std::vector<int> received[kRanks];
  bool hung = false;
  auto status = RunOnRanks(channel, [&](int r) -> absl::Status {
    RankChannel control(channel, r);
    for (int round = 0; round < 500; ++round) {
      const int root = round % kRanks;
      int value = r == root ? round * 10 + root : -1;
      FLOVER_RETURN_IF_ERROR(control.Broadcast(&value, sizeof(value), root));
      received[r].push_back(value);
      FLOVER_RETURN_IF_ERROR(control.Barrier());
    }
    return absl::OkStatus();
  }, &hung, std::chrono::seconds(30));
  ASSERT_FALSE(hung);
  ASSERT_TRUE(AllOk(status)) << Describe(status);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(received[r].size(), 500u);
    for (int round = 0; round < 500; ++round) {
      EXPECT_EQ(received[r][round], round * 10 + round % kRanks);
    }
  }
}

TEST(InProcessRanksTest, AFailedRankReleasesItsPeer) {
  ThreadChannel channel;
  bool hung = false;
  auto status = RunOnRanks(channel, [&](int r) -> absl::Status {
    if (r == 0) return absl::InternalError("rank 0 gives up before the broadcast");
    RankChannel control(channel, r);
    int id = 0;
    return control.Broadcast(&id, sizeof(id), 0);
  }, &hung, std::chrono::seconds(30));
  ASSERT_FALSE(hung);
  EXPECT_EQ(status[0].code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status[1].message().find("rank 0 gives up"), std::string::npos) << status[1];
  // Abort wakes a waiting peer the same way; the channel stays failed.
  ThreadChannel second;
  status = RunOnRanks(second, [&](int r) -> absl::Status {
    RankChannel control(second, r);
    if (r == 1) {
      control.Abort(3);
      return absl::OkStatus();
    }
    return control.Barrier();
  }, &hung, std::chrono::seconds(30));
  ASSERT_FALSE(hung);
  EXPECT_NE(status[0].message().find("aborted with code 3"), std::string::npos) << status[0];
  EXPECT_TRUE(status[1].ok());
  EXPECT_FALSE(RankChannel(second, 1).Barrier().ok());
}

TEST(InProcessRanksTest, ARankStuckPastTheLimitIsLeftBehind) {
  static std::atomic<bool> release{false};
  // Never freed (and reachable): the stuck thread may still hold it when
  // this test ends.
  static ThreadChannel* const channel = new ThreadChannel;
  bool hung = false;
  const auto start = std::chrono::steady_clock::now();
  auto status = RunOnRanks(*channel, [](int r) -> absl::Status {
    channel->Note(r, "waiting where the channel cannot wake it");
    if (r == 0) return absl::OkStatus();
    for (int i = 0; i < 30000 && !release.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return absl::OkStatus();
  }, &hung, std::chrono::milliseconds(200), std::chrono::milliseconds(200));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  release = true;
  EXPECT_TRUE(hung);
  EXPECT_LT(waited, 10.0);
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_EQ(status[1].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status[1].message().find("cannot wake it"), std::string::npos) << status[1];
}

// ---------------------------------------------------------------------------
// On the GPU.

// Everything a case's ranks touch. Left allocated (never freed) when a rank
// is stuck, so the stuck thread never reads freed memory and no destructor
// waits on its kernel. Members go in reverse order: models, then the
// collectives, then the backends.
struct World {
  ThreadChannel channel;
  std::unique_ptr<RankChannel> control[kRanks];
  std::unique_ptr<kernels::Backend> backend[kRanks];
  std::unique_ptr<Collectives> nccl[kRanks];
  std::unique_ptr<FencedCollectives> fenced[kRanks];
  // The decoder cases: TP=1 on its own backend, and each rank's shard.
  std::unique_ptr<kernels::Backend> one_backend;
  std::unique_ptr<LoadedModel> loaded;
  std::unique_ptr<CausalLm> one;
  std::unique_ptr<CausalLm> tp[kRanks];
};

enum class Outcome { kReady, kSkip, kFail };

class NcclTwoRanks : public ::testing::Test {
 protected:
  // Both ranks' backends on `device` (and TP=1's with `reference`), then
  // the collectives between the ranks: NCCL on "cuda", HostCollectives on
  // "cpu". kSkip/kFail with *why otherwise.
  Outcome Open(const std::string& device, kernels::MatmulDtype matmul, kernels::KvDtype kv,
               bool reference, std::string* why) {
    if (g_hung) {
      *why = "an earlier case left a rank thread stuck in NCCL or CUDA; nothing more runs on "
             "this GPU";
      return Outcome::kFail;
    }
    w_ = std::make_unique<World>();
    for (int r = 0; r < kRanks; ++r) {
      w_->control[r] = std::make_unique<RankChannel>(w_->channel, r);
      w_->backend[r] = testing::BackendForTest(device, why, matmul, kv);
      if (w_->backend[r] == nullptr) return Outcome::kSkip;  // a failure too where cuda is required
    }
    if (reference) {
      w_->one_backend = testing::BackendForTest(device, why, matmul, kv);
      if (w_->one_backend == nullptr) return Outcome::kSkip;
    }
    World& w = *w_;
    if (device == "cpu") {
      for (int r = 0; r < kRanks; ++r) {
        w.nccl[r] = std::make_unique<HostCollectives>(*w.control[r]);
        w.fenced[r] = std::make_unique<FencedCollectives>(*w.nccl[r], *w.backend[r], *w.control[r]);
      }
      return Outcome::kReady;
    }
    if (!g_refused.empty()) {
      *why = g_refused;
      return Outcome::kSkip;
    }
    bool hung = false;
    const std::vector<absl::Status> status = RunOnRanks(w.channel, [&w](int r) -> absl::Status {
      w.channel.Note(r, "CreateDeviceCollectives (NCCL set-up)");
      auto c = kernels::CreateDeviceCollectives(*w.control[r], *w.backend[r]);
      if (!c.ok()) return c.status();
      w.nccl[r] = std::move(*c);
      w.fenced[r] = std::make_unique<FencedCollectives>(*w.nccl[r], *w.backend[r], *w.control[r]);
      w.channel.Note(r, "NCCL set up");
      return absl::OkStatus();
    }, &hung);
    hung_ = hung;
    const std::string version = NcclVersion();
    if (AllOk(status)) {
      std::printf("NCCL %s: two ranks on %s\n", version.c_str(),
                  w.backend[0]->Device().name.c_str());
      return Outcome::kReady;
    }
    // ncclCommInitRank's invalid usage ("Duplicate GPU detected" where NCCL
    // says why): NCCL's refusal, not a fault of ours.
    bool refused = false;
    for (const absl::Status& s : status) {
      const absl::string_view m = s.message();
      refused = refused || m.find("Duplicate GPU") != m.npos ||
                (m.find("communicator set-up") != m.npos && m.find("invalid usage") != m.npos);
    }
    if (refused && !hung) {
      const char* setting = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
      g_refused = absl::StrCat("NCCL ", version,
                               " refuses two ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=",
                               setting ? setting : "", " set; an NCCL that allows it runs these ",
                               "cases): ", Describe(status));
      std::printf("%s\n", g_refused.c_str());
      *why = g_refused;
      return Outcome::kSkip;
    }
    *why = absl::StrCat("NCCL ", version, " set-up of two ranks on one GPU failed: ",
                        Describe(status));
    return Outcome::kFail;
  }

  // Runs the ranks' work; records a stuck rank.
  std::vector<absl::Status> Run(std::function<absl::Status(int)> body) {
    bool hung = false;
    auto status = RunOnRanks(w_->channel, std::move(body), &hung);
    hung_ = hung_ || hung;
    return status;
  }

  void TearDown() override {
    if (w_ == nullptr) return;
    if (!hung_ && (w_->nccl[0] != nullptr || w_->nccl[1] != nullptr)) {
      // Each rank lets its shard and communicator go on its own thread, side
      // by side (a communicator's destruction may wait for its peer).
      World& w = *w_;
      bool hung = false;
      const auto status = RunOnRanks(w.channel, [&w](int r) -> absl::Status {
        w.channel.Note(r, "teardown (the shard, then ncclCommDestroy)");
        w.tp[r].reset();
        w.fenced[r].reset();
        w.nccl[r].reset();
        return absl::OkStatus();
      }, &hung);
      if (hung) ADD_FAILURE() << "teardown: " << Describe(status);
      hung_ = hung;
    }
    if (hung_) {
      g_hung = true;
      (void)w_.release();  // a stuck rank may still use it; see World
      return;
    }
    w_.reset();
  }

  std::unique_ptr<World> w_;
  bool hung_ = false;
};

#define OPEN_OR_RETURN(device, matmul, kv, reference)               \
  do {                                                              \
    std::string why_;                                               \
    const Outcome outcome_ = Open(device, matmul, kv, reference, &why_); \
    if (outcome_ == Outcome::kSkip) GTEST_SKIP() << why_;           \
    if (outcome_ == Outcome::kFail) FAIL() << why_;                 \
  } while (0)

// A bf16 bit pattern of a float that bf16 holds exactly.
uint16_t ExactBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  EXPECT_EQ(u & 0xffffu, 0u) << x << " is not a bfloat16";
  return static_cast<uint16_t>(u >> 16);
}

std::vector<float> Normal(size_t n, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

using NcclTwoRanksTest = NcclTwoRanks;

// Rank r uploads its own data; afterwards both hold the sum. Two addends
// make one rounding whatever NCCL's order (addition commutes), so f32 is
// the host's a + b bit for bit; bf16 gets small integers times a shared
// power of two, whose sums bf16 holds exactly. Then rank 0 gathers [2, 3]
// from itself and [2, 5] from rank 1, in rank order, and a smaller second
// gather reuses its landing space.
TEST_F(NcclTwoRanksTest, AllReduceSumsAndGathersToRankZero_cuda) {
  OPEN_OR_RETURN("cuda", kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, false);
  constexpr int kFRows = 3, kFCols = 1000, kHRows = 5, kHCols = 333;
  const int gather_cols[kRanks] = {3, 5}, second_cols[kRanks] = {1, 2};
  constexpr int kGatherRows = 2;
  struct Rank {
    std::vector<float> f, g, g2;
    std::vector<uint16_t> h;
    std::vector<float> f_out, gathered, gathered2;
    std::vector<uint16_t> h_out;
  };
  // Shared with the rank threads, which outlive this test if one is stuck.
  const auto in = std::make_shared<std::array<Rank, kRanks>>();
  std::mt19937 rng(7);
  std::vector<int> exponent(kHRows * kHCols);
  for (int& e : exponent) e = static_cast<int>(rng() % 41) - 20;
  std::vector<int> ints[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    Rank& rank = (*in)[r];
    rank.f = Normal(size_t(kFRows) * kFCols, 10 + r);
    rank.g = Normal(size_t(kGatherRows) * gather_cols[r], 20 + r);
    rank.g2 = Normal(size_t(kGatherRows) * second_cols[r], 30 + r);
    for (size_t i = 0; i < exponent.size(); ++i) {
      ints[r].push_back(static_cast<int>(rng() % 201) - 100);
      rank.h.push_back(ExactBf16(std::ldexp(float(ints[r][i]), exponent[i])));
    }
  }
  const Rank& in0 = (*in)[0];
  const Rank& in1 = (*in)[1];
  std::vector<float> f_sum(in0.f.size());
  for (size_t i = 0; i < f_sum.size(); ++i) f_sum[i] = in0.f[i] + in1.f[i];
  std::vector<uint16_t> h_sum;
  for (size_t i = 0; i < exponent.size(); ++i) {
    h_sum.push_back(ExactBf16(std::ldexp(float(ints[0][i] + ints[1][i]), exponent[i])));
  }

  World& w = *w_;
  const auto status = Run([&w, in, gather_cols, second_cols](int r) -> absl::Status {
    kernels::Backend& b = *w.backend[r];
    Rank& mine = (*in)[r];
    // Everything allocated and uploaded before the first collective.
    w.channel.Note(r, "allocating");
    FLOVER_ASSIGN_OR_RETURN(kernels::Buffer f, b.Allocate(kernels::DType::kF32, kFRows, kFCols));
    FLOVER_ASSIGN_OR_RETURN(kernels::Buffer h, b.Allocate(kernels::DType::kBF16, kHRows, kHCols));
    FLOVER_ASSIGN_OR_RETURN(kernels::Buffer g,
                            b.Allocate(kernels::DType::kF32, kGatherRows, gather_cols[r]));
    FLOVER_ASSIGN_OR_RETURN(kernels::Buffer g2,
                            b.Allocate(kernels::DType::kF32, kGatherRows, second_cols[r]));
    FLOVER_RETURN_IF_ERROR(b.Upload(mine.f.data(), f));
    FLOVER_RETURN_IF_ERROR(b.Upload(mine.h.data(), h));
    FLOVER_RETURN_IF_ERROR(b.Upload(mine.g.data(), g));
    FLOVER_RETURN_IF_ERROR(b.Upload(mine.g2.data(), g2));
    Collectives& c = *w.fenced[r];
    w.channel.Note(r, "f32 all-reduce");
    FLOVER_RETURN_IF_ERROR(c.AllReduceSum(f));
    mine.f_out.resize(mine.f.size());
    FLOVER_RETURN_IF_ERROR(b.Download(f, mine.f_out.data()));
    w.channel.Note(r, "bf16 all-reduce");
    FLOVER_RETURN_IF_ERROR(c.AllReduceSum(h));
    mine.h_out.resize(mine.h.size());
    FLOVER_RETURN_IF_ERROR(b.Download(h, mine.h_out.data()));
    w.channel.Note(r, "gather to rank 0");
    FLOVER_RETURN_IF_ERROR(c.GatherToLeader(g, &mine.gathered));
    w.channel.Note(r, "second (smaller) gather to rank 0");
    FLOVER_RETURN_IF_ERROR(c.GatherToLeader(g2, &mine.gathered2));
    w.channel.Note(r, "done");
    return absl::OkStatus();
  });
  ASSERT_TRUE(AllOk(status)) << Describe(status);

  for (const Rank& rank : *in) {
    const int r = &rank == &in0 ? 0 : 1;
    ASSERT_EQ(rank.f_out.size(), f_sum.size());
    EXPECT_EQ(std::memcmp(rank.f_out.data(), f_sum.data(), f_sum.size() * sizeof(float)), 0)
        << "rank " << r << ": f32 sums differ from a + b";
    EXPECT_EQ(rank.h_out, h_sum) << "rank " << r << ": bf16 sums";
  }
  std::vector<float> want = in0.g;
  want.insert(want.end(), in1.g.begin(), in1.g.end());
  EXPECT_EQ(in0.gathered, want) << "[2, 3] from rank 0, then [2, 5] from rank 1";
  want = in0.g2;
  want.insert(want.end(), in1.g2.begin(), in1.g2.end());
  EXPECT_EQ(in0.gathered2, want) << "[2, 1] from rank 0, then [2, 2] from rank 1";
}

struct DecoderCase {
  const char* name;  // the test's suffix: has the device, for --gtest_filter=*cuda*
  const char* device;
  const char* model;
  kernels::MatmulDtype matmul;
  kernels::KvDtype kv;
};

void PrintTo(const DecoderCase& c, std::ostream* os) { *os << c.name; }

class NcclTwoRanksDecoderTest : public NcclTwoRanks,
                                public ::testing::WithParamInterface<DecoderCase> {};

// TP=2 over the two ranks against TP=1 on a third backend of the same GPU
// and dtype: logits at every position of prompts of 1, 7 and ~100 tokens
// (the longest first, so rank 0's gather space is sized once), and 32
// greedy tokens. Greedy outputs must be equal; where they part, TP=1's
// logits must have the two tokens within what the logit bound lets TP=2
// reorder (a near tie), else it fails.
TEST_P(NcclTwoRanksDecoderTest, Tp2MatchesTp1) {
  const DecoderCase& c = GetParam();
  OPEN_OR_RETURN(c.device, c.matmul, c.kv, true);
  World& w = *w_;
  auto m = LoadModel(c.model);
  ASSERT_TRUE(m.ok()) << m.status();
  w.loaded = std::move(*m);
  ASSERT_TRUE(w.loaded->CheckTensorParallel(kRanks).ok()) << w.loaded->CheckTensorParallel(kRanks);
  const int V = w.loaded->info().vocab_size;
  const int P = std::min(w.loaded->info().max_positions, 512);
  const std::vector<int> lengths = {std::min(100, P - 2), 7, 1};
  auto prompt_of = [V](int len) {
    std::vector<int32_t> prompt(len);
    for (int i = 0; i < len; ++i) prompt[i] = (i * 37 + 11) % V;
    return prompt;
  };
  const GenerateOptions greedy = GreedyTokens(32);
  const std::vector<int32_t> greedy_prompt = {3, 1, 4, 1, 5, 9, 2};
  const bool bf16 = c.matmul == kernels::MatmulDtype::kBF16 || c.kv == kernels::KvDtype::kBF16;
  const double bound = bf16 ? 1e-2 : 1e-4;

  // TP=1 first, on this thread (the ranks are idle: nothing of NCCL's runs).
  w.one = testing::ModelOn(*w.one_backend, *w.loaded);
  std::vector<std::vector<float>> one_logits;
  for (int len : lengths) {
    ForwardBatch b;
    b.AddSequence(testing::SeqBlocks(0, P), 0, prompt_of(len));
    auto cache = testing::CacheFor(*w.one, 1, P);
    one_logits.emplace_back();
    ASSERT_TRUE(w.one->Forward(b, *cache, LogitsFor::kEveryRow, &one_logits.back()).ok());
    ASSERT_EQ(one_logits.back().size(), size_t(len) * V);
  }
  auto one_out = GenerateAlone(*w.one, greedy_prompt, greedy);
  ASSERT_TRUE(one_out.ok()) << one_out.status();

  // TP=2: every rank runs every forward (they are collective).
  struct RankOut {
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> greedy;
  };
  // Shared with the rank threads, which outlive this test if one is stuck.
  const auto shared_out = std::make_shared<std::array<RankOut, kRanks>>();
  std::array<RankOut, kRanks>& out = *shared_out;
  const auto status = Run([&w, shared_out, lengths, P, prompt_of, greedy,
                           greedy_prompt](int r) -> absl::Status {
    std::array<RankOut, kRanks>& out = *shared_out;
    w.channel.Note(r, "instantiating its shard");
    FLOVER_ASSIGN_OR_RETURN(w.tp[r], w.loaded->Instantiate(*w.backend[r], w.fenced[r].get()));
    CausalLm& tp = *w.tp[r];
    for (int len : lengths) {
      w.channel.Note(r, absl::StrCat("forward of ", len, " rows"));
      ForwardBatch b;
      b.AddSequence(testing::SeqBlocks(0, P), 0, prompt_of(len));
      FLOVER_ASSIGN_OR_RETURN(
          auto cache, KvCache::Create(*w.backend[r], tp.CacheShape(KvCacheShape::BlocksFor(P), P)));
      out[r].logits.emplace_back();
      FLOVER_RETURN_IF_ERROR(tp.Forward(b, *cache, LogitsFor::kEveryRow, &out[r].logits.back()));
    }
    w.channel.Note(r, "greedy generation");
    FLOVER_ASSIGN_OR_RETURN(out[r].greedy,
                            GenerateAlone(tp, greedy_prompt, greedy, w.control[r].get()));
    w.channel.Note(r, "done");
    return absl::OkStatus();
  });
  ASSERT_TRUE(AllOk(status)) << Describe(status);

  double worst = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int len = lengths[i];
    EXPECT_TRUE(out[1].logits[i].empty()) << "rank 1 got logits";
    const std::vector<float>& tp = out[0].logits[i];
    ASSERT_EQ(tp.size(), one_logits[i].size()) << "len " << len;
    for (int row = 0; row < len; ++row) {
      const double e =
          testing::ScaledError(&tp[size_t(row) * V], &one_logits[i][size_t(row) * V], V);
      worst = std::max(worst, e);
      EXPECT_LT(e, bound) << c.model << " len " << len << " row " << row;
    }
  }
  // Rank 1 took every token from rank 0's broadcasts.
  EXPECT_EQ(out[1].greedy, out[0].greedy);
  const size_t agree = testing::AgreeingPrefix(out[0].greedy, *one_out);
  std::printf("%s %s: worst scaled logit error TP=2 vs TP=1 %.2e (bound %.0e); greedy tokens "
              "agreeing %zu of %zu\n",
              c.model, c.name, worst, bound, agree, one_out->size());
  if (out[0].greedy == *one_out) return;
  ASSERT_EQ(out[0].greedy.size(), one_out->size());
  // Where they part: TP=2's logits are within bound * max|TP=1's| of TP=1's,
  // so TP=2 may prefer b over TP=1's a only if TP=1 has a - b within twice that.
  std::vector<int32_t> prefix = greedy_prompt;
  prefix.insert(prefix.end(), one_out->begin(), one_out->begin() + agree);
  ForwardBatch b;
  b.AddSequence(testing::SeqBlocks(0, P), 0, prefix);
  auto cache = testing::CacheFor(*w.one, 1, P);
  std::vector<float> last;
  ASSERT_TRUE(w.one->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &last).ok());
  ASSERT_EQ(last.size(), size_t(V));
  double scale = 0;
  for (float x : last) scale = std::max(scale, double{std::fabs(x)});
  const int32_t a = (*one_out)[agree], other = out[0].greedy[agree];
  const double gap = double{last[a]} - double{last[other]};
  std::printf("%s %s: greedy parts at token %zu: TP=1 %d, TP=2 %d, TP=1's logits %.6f vs %.6f "
              "(gap %.2e of scale %.2e)\n",
              c.model, c.name, agree, a, other, last[a], last[other], gap, scale);
  EXPECT_LE(gap, 2 * bound * scale)
      << c.model << ": TP=2's token " << other << " at step " << agree
      << " is further below TP=1's " << a << " than the logit bound allows";
}

INSTANTIATE_TEST_SUITE_P(
    Decoders, NcclTwoRanksDecoderTest,
    ::testing::Values(
        DecoderCase{"llama_tiny_cuda_f32", "cuda", "builtin:llama-tiny",
                    kernels::MatmulDtype::kF32, kernels::KvDtype::kF32},
        DecoderCase{"llama_tiny_cuda_bf16", "cuda", "builtin:llama-tiny",
                    kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16},
        // Grouped-query attention (each rank one of two key/value heads), an
        // odd vocabulary (301: the ranks' ranges differ by one).
        DecoderCase{"llama_gqa_cuda_f32", "cuda", "tests/golden/llama_gqa",
                    kernels::MatmulDtype::kF32, kernels::KvDtype::kF32},
        DecoderCase{"llama_gqa_cuda_bf16", "cuda", "tests/golden/llama_gqa",
                    kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16},
        // The same ranks, channel and fences on the CPU with host-memory
        // collectives: the harness and the TP=2 flow on any host.
        DecoderCase{"llama_gqa_cpu_f32", "cpu", "tests/golden/llama_gqa",
                    kernels::MatmulDtype::kF32, kernels::KvDtype::kF32}),
    [](const ::testing::TestParamInfo<DecoderCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  // Before any NCCL call: an NCCL that knows the setting lets two ranks
  // share a GPU. NCCL's warnings (why it refused, say) go to the log.
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
  setenv("NCCL_DEBUG", "WARN", 0);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (flover::g_hung) {
    // A rank thread is stuck on the GPU: tearing CUDA down could wait for it.
    std::fflush(nullptr);
    std::_Exit(rc != 0 ? rc : 1);
  }
  return rc;
}
