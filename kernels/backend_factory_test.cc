// The backend registry: --device names a registered kind (with an ordinal
// where the kind has them), a registered kind's factory makes its backends,
// and tensor-parallel ranks take their node-local device.
#include "kernels/backend_factory.h"

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_backend.h"

namespace flover::kernels {
namespace {

TEST(BackendFactoryTest, BuiltInKindsAndTheirNames) {
  std::vector<std::string> names;
  for (const BackendKind& kind : BackendKinds()) names.push_back(kind.name);
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "cpu");
  EXPECT_EQ(names[1], "cuda");
  EXPECT_TRUE(ValidateDevice("cpu").ok());
  EXPECT_TRUE(ValidateDevice("cuda").ok());
  EXPECT_TRUE(ValidateDevice("cuda:3").ok());
  // The CPU has no ordinals; neither a negative nor a missing ordinal is one.
  for (const char* bad : {"cpu:0", "cuda:-1", "cuda:", "cuda:x", "tpu", ""}) {
    const absl::Status st = ValidateDevice(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("--device: must be cpu, cuda or cuda:N"), std::string::npos)
        << st.message();
  }
  EXPECT_FALSE(HasDeviceCollectives("cpu"));
  EXPECT_TRUE(HasDeviceCollectives("cuda:1"));
}

TEST(BackendFactoryTest, RanksTakeTheirNodeLocalDevice) {
  WorldConfig one;
  WorldConfig second_of_two{.world_size = 2, .rank = 1, .tp_size = 2, .tp_rank = 1,
                            .local_rank = 1, .local_size = 2};
  EXPECT_EQ(DeviceForRank("cuda", one), "cuda");
  EXPECT_EQ(DeviceForRank("cuda", second_of_two), "cuda:1");
  EXPECT_EQ(DeviceForRank("cuda:0", second_of_two), "cuda:0");  // asked for by number
  EXPECT_EQ(DeviceForRank("cpu", second_of_two), "cpu");        // no ordinals
}

TEST(BackendFactoryTest, ARegisteredKindServesItsDevices) {
  std::vector<std::string> asked;
  BackendKind fake;
  fake.name = "fake";
  fake.has_ordinals = true;
  fake.create = [&asked](const BackendOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
    asked.push_back(options.device);
    auto cpu = CpuBackend::Create(options.matmul, options.kv);  // stands in for a device
    if (!cpu.ok()) return cpu.status();
    return std::unique_ptr<Backend>(std::move(*cpu));
  };
  RegisterBackendKind(fake);
  EXPECT_TRUE(ValidateDevice("fake:2").ok());
  EXPECT_NE(ValidateDevice("tpu").message().find("cuda:N, fake or fake:N"), std::string::npos)
      << ValidateDevice("tpu").message();
  BackendOptions options;
  options.device = "fake:2";
  auto backend = CreateBackend(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ(asked, std::vector<std::string>{"fake:2"});
  // No device collectives: a backend of a kind without them is refused.
  EXPECT_FALSE(HasDeviceCollectives("fake"));
}

}  // namespace
}  // namespace flover::kernels
