// ggml's q8_0 / q4_0 quantizers against gguf-py's (tests/golden/ggml_quant:
// 42 groups of 32 values, from 1e-6 to 3e4 in scale, zeros, ties and equal
// magnitudes), bit for bit: the scale's half bits and every code.
#include "kernels/ggml_quant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "testing/files.h"
#include "util/json.h"

namespace flover::kernels {
namespace {

std::vector<uint8_t> Bytes(const std::string& hex) {
  const std::string raw = absl::HexStringToBytes(hex);
  return std::vector<uint8_t>(raw.begin(), raw.end());
}

TEST(GgmlQuantTest, GroupsAreQuantizedAsGgufPyDoes) {
  const std::string text = ::flover::testing::ReadFileOrEmpty("tests/golden/ggml_quant/groups.json");
  ASSERT_FALSE(text.empty()) << "tests/golden/ggml_quant/groups.json is missing";
  auto doc = ParseJsonObject(text, "groups.json");
  ASSERT_TRUE(doc.ok()) << doc.status();
  const auto& groups = doc->fields().at("groups").list_value().values();
  ASSERT_EQ(groups.size(), 42u);
  for (int gi = 0; gi < groups.size(); ++gi) {
    const auto& g = groups[gi].struct_value().fields();
    float x[32];
    const auto& xs = g.at("x").list_value().values();
    ASSERT_EQ(xs.size(), 32);
    for (int i = 0; i < 32; ++i) {
      const uint32_t bits = static_cast<uint32_t>(std::stoul(xs[i].string_value(), nullptr, 16));
      std::memcpy(&x[i], &bits, 4);
    }
    // gguf-py's blocks: [half d][codes].
    const std::vector<uint8_t> q8 = Bytes(g.at("q8_0").string_value());
    const std::vector<uint8_t> q4 = Bytes(g.at("q4_0").string_value());
    ASSERT_EQ(q8.size(), 34u);
    ASSERT_EQ(q4.size(), 18u);
    int8_t codes8[32];
    uint8_t codes4[16];
    uint16_t d8 = 0, d4 = 0;
    QuantizeQ8_0Group(x, codes8, &d8);
    QuantizeQ4_0Group(x, codes4, &d4);
    EXPECT_EQ(d8, q8[0] | (q8[1] << 8)) << "group " << gi;
    EXPECT_EQ(d4, q4[0] | (q4[1] << 8)) << "group " << gi;
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(static_cast<uint8_t>(codes8[i]), q8[2 + i]) << "group " << gi << " value " << i;
    }
    for (int i = 0; i < 16; ++i) EXPECT_EQ(codes4[i], q4[2 + i]) << "group " << gi << " byte " << i;
  }
}

}  // namespace
}  // namespace flover::kernels
