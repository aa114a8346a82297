// Helpers shared by the tests that compare with golden fixtures.
#ifndef FLOVER_TESTING_GOLDEN_H_
#define FLOVER_TESTING_GOLDEN_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
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

// A tensor's stored bytes from a safetensors file, whatever its dtype (the
// fixtures' ids, positions and u8 pixels), with its dtype in *dtype; empty
// (and a test failure) where the file or tensor is missing.
inline std::string RawGoldenTensor(const std::string& path, const std::string& name, std::string* dtype) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(f ? n : 0, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header.size()));
  auto h = ParseJsonObject(header, path);
  EXPECT_TRUE(h.ok()) << h.status();
  if (!h.ok() || !h->fields().contains(name)) {
    ADD_FAILURE() << path << " has no tensor " << name;
    return "";
  }
  const google::protobuf::Struct& t = h->fields().at(name).struct_value();
  *dtype = t.fields().at("dtype").string_value();
  const auto& offsets = t.fields().at("data_offsets").list_value().values();
  const auto begin = static_cast<uint64_t>(offsets[0].number_value());
  const auto end = static_cast<uint64_t>(offsets[1].number_value());
  std::string bytes(end - begin, '\0');
  f.seekg(static_cast<std::streamoff>(8 + n + begin));
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// An I32 tensor of a safetensors file (see RawGoldenTensor).
inline std::vector<int32_t> GoldenInts(const std::string& path, const std::string& name) {
  std::string dtype;
  const std::string bytes = RawGoldenTensor(path, name, &dtype);
  EXPECT_EQ(dtype, "I32") << name;
  std::vector<int32_t> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
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
