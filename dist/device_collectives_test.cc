// Device collectives (NCCL through the CUDA module) on one rank of one GPU:
// real NCCL calls whose results must be the identity — an all-reduce over
// one rank leaves f32 and bf16 data bitwise as it was, a gather to the
// leader returns the rank's own rows. (Two ranks need two GPUs; see the
// docs/gpu.md for what has run.) On a host without a GPU the CUDA case skips with
// the reason; the CPU case runs everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "dist/communicator.h"
#include "testing/backends.h"
#include "kernels/backend_factory.h"

namespace flover {
namespace {

std::vector<uint16_t> RandomBits(size_t n, int seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  // bf16 bit patterns of ordinary numbers (exponent kept away from inf/nan).
  for (auto& x : v) x = static_cast<uint16_t>((rng() & 0x807f) | ((100 + rng() % 50) << 7));
  return v;
}

TEST(DeviceCollectivesTest, CpuBackendIsRefusedByName) {
  auto cpu = testing::CpuBackend();
  LocalCommunicator control;
  auto c = kernels::CreateDeviceCollectives(control, *cpu);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("cpu backend"), std::string::npos) << c.status();
}

TEST(DeviceCollectivesTest, OneRankNcclIsTheIdentity_cuda) {
  std::string skip;
  auto gpu = testing::BackendForTest("cuda", &skip);
  if (gpu == nullptr) GTEST_SKIP() << skip;
  LocalCommunicator control;
  auto c = kernels::CreateDeviceCollectives(control, *gpu);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->world().world_size, 1);

  // f32 all-reduce.
  std::vector<float> f(3 * 1000);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : f) x = normal(rng);
  auto fb = gpu->Allocate(kernels::DType::kF32, 3, 1000);
  ASSERT_TRUE(fb.ok());
  ASSERT_TRUE(gpu->Upload(f.data(), *fb).ok());
  ASSERT_TRUE((*c)->AllReduceSum(*fb).ok());
  std::vector<float> back(f.size());
  ASSERT_TRUE(gpu->Download(*fb, back.data()).ok());
  EXPECT_EQ(std::memcmp(back.data(), f.data(), f.size() * sizeof(float)), 0);

  // bf16 all-reduce.
  const std::vector<uint16_t> h = RandomBits(5 * 333, 2);
  auto hb = gpu->Allocate(kernels::DType::kBF16, 5, 333);
  ASSERT_TRUE(hb.ok());
  ASSERT_TRUE(gpu->Upload(h.data(), *hb).ok());
  ASSERT_TRUE((*c)->AllReduceSum(*hb).ok());
  std::vector<uint16_t> hback(h.size());
  ASSERT_TRUE(gpu->Download(*hb, hback.data()).ok());
  EXPECT_EQ(hback, h);

  // Gather to the leader: the rank's own rows, twice (the landing space is
  // reused), the second time larger.
  for (int cols : {777, 1500}) {
    std::vector<float> local(2 * cols);
    for (float& x : local) x = normal(rng);
    auto lb = gpu->Allocate(kernels::DType::kF32, 2, cols);
    ASSERT_TRUE(lb.ok());
    ASSERT_TRUE(gpu->Upload(local.data(), *lb).ok());
    std::vector<float> gathered;
    ASSERT_TRUE((*c)->GatherToLeader(*lb, &gathered).ok());
    EXPECT_EQ(gathered, local);
  }
  ASSERT_TRUE(gpu->Synchronize().ok());
}

}  // namespace
}  // namespace flover
