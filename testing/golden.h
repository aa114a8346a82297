// Helpers shared by the tests that compare with golden fixtures.
#ifndef FLOVER_TESTING_GOLDEN_H_
#define FLOVER_TESTING_GOLDEN_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "util/json.h"
#include "model/loader/safetensors.h"
#include "testing/files.h"
#include "google/protobuf/struct.pb.h"

namespace flover::testing {

// max |a - b| / max |b| over n values: "within 1e-4 relative to the logit scale".
inline double ScaledError(const float* a, const float* b, size_t n) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / scale;
}

// A JSON list of numbers as token ids.
inline std::vector<int32_t> JsonIds(const google::protobuf::Value& list) {
  std::vector<int32_t> ids;
  for (const auto& v : list.list_value().values()) ids.push_back(static_cast<int32_t>(v.number_value()));
  return ids;
}

// How many leading tokens of `a` and `b` agree (greedy continuations of a
// reduced dtype against F32's, say).
inline size_t AgreeingPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// What tests/golden/make_golden.py wrote for one fixture model.
struct Golden {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> logits;  // [len, V] per prompt
  std::vector<int32_t> greedy_prompt, greedy_output;
  std::string stored_dtype;
};

// PREFIX.<i> from a safetensors file: [len, V] f32 logits for each prompt;
// failures are test failures.
inline std::vector<std::vector<float>> LoadPromptLogits(
    const std::string& path, const std::string& prefix,
    const std::vector<std::vector<int32_t>>& prompts, int vocab) {
  std::vector<std::vector<float>> out;
  auto file = SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto l = file->ReadFloat(prefix + "." + std::to_string(i),
                             {int64_t(prompts[i].size()), int64_t(vocab)});
    EXPECT_TRUE(l.ok()) << l.status();
    out.push_back(l.ok() ? *l : std::vector<float>());
  }
  return out;
}

// Reads DIR/golden.json and DIR/golden_logits.safetensors; failures are
// test failures.
inline Golden LoadGolden(const std::string& dir, int vocab) {
  Golden g;
  auto json = ParseJsonObject(ReadFileOrEmpty(dir + "/golden.json"), "golden.json");
  EXPECT_TRUE(json.ok()) << json.status();
  if (!json.ok()) return g;
  const auto& f = json->fields();
  for (const auto& p : f.at("prompts").list_value().values()) g.prompts.push_back(JsonIds(p));
  g.greedy_prompt = JsonIds(f.at("greedy_prompt"));
  g.greedy_output = JsonIds(f.at("greedy_output"));
  g.stored_dtype = f.at("stored_dtype").string_value();
  g.logits = LoadPromptLogits(dir + "/golden_logits.safetensors", "logits", g.prompts, vocab);
  return g;
}

}  // namespace flover::testing

#endif  // FLOVER_TESTING_GOLDEN_H_
