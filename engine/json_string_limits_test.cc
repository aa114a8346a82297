// Limits on a JSON output's string values (engine/json_string_limits.h),
// on the tiny fixture's byte-level vocabulary: the texts are walked token
// by token through the mask as the engine does; an engine run with a random
// model shows that a limited string ends where an unlimited one runs on.
#include "engine/json_string_limits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/grammar_constraint.h"
#include "model/model_loader.h"
#include "nlohmann/json.hpp"
#include "testing/backends.h"
#include "testing/collecting_sink.h"

namespace flover {
namespace {

class JsonStringLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = testing::ValueOrDie(LoadModel("tests/golden/tiny_f32"), "tiny_f32");
    tokens_ = std::make_shared<TokenBytes>(*loaded_->tokenizer());
    grammars_ = std::make_unique<GrammarConstraints>(tokens_, loaded_->info().eos_token_ids);
  }
  std::shared_ptr<const CompiledConstraint> Schema(const std::string& schema, JsonStringLimits limits) {
    auto c = grammars_->JsonSchema(schema, "json_schema", limits);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }
  // The one token spelling `c`.
  int32_t ByteToken(char c) const {
    const std::vector<int32_t>* ids = tokens_->TokensSpelling(std::string(1, c));
    EXPECT_NE(ids, nullptr) << c;
    return ids == nullptr ? -1 : ids->front();
  }
  // Walks `text` one byte token at a time; the bytes taken, and the state.
  std::string WalkBytes(ConstraintState& state, const std::string& text) {
    std::string taken;
    for (char c : text) {
      const int32_t t = ByteToken(c);
      if (!HasToken(state.AllowedNext(), t) || !state.Accept(t).ok()) break;
      taken += c;
    }
    return taken;
  }
  // Whether every token the state allows starts by closing the string.
  bool OnlyClosing(const ConstraintState& state) const {
    int allowed = 0;
    for (int32_t t = 0; t < tokens_->vocab_size(); ++t) {
      if (!HasToken(state.AllowedNext(), t)) continue;
      ++allowed;
      if (tokens_->Of(t).empty() || tokens_->Of(t)[0] != '"') return false;
    }
    return allowed > 0;
  }

  std::unique_ptr<LoadedModel> loaded_;
  std::shared_ptr<TokenBytes> tokens_;
  std::unique_ptr<GrammarConstraints> grammars_;
};

TEST_F(JsonStringLimitsTest, AStringValueHoldsAtMostMaxLengthCharacters) {
  const std::string schema =
      R"({"type": "object", "properties": {"a_long_member_name": {"type": "string"}}, "required": ["a_long_member_name"]})";
  auto c = Schema(schema, {/*max_length=*/5, 0});
  // Member names are not limited; a value stops at 5 characters: an
  // escape counts as one, a two-byte character as one.
  for (const std::string& value : {std::string("abcde"), std::string("ab\\ncd"), std::string("\xc3\xa9" "bcde")}) {
    auto state = c->Start();
    const std::string text = "{\"a_long_member_name\": \"" + value + "x";
    EXPECT_EQ(WalkBytes(*state, text), text.substr(0, text.size() - 1)) << value;
    EXPECT_TRUE(OnlyClosing(*state)) << value;
    EXPECT_EQ(WalkBytes(*state, "\"}"), "\"}");
    EXPECT_TRUE(state->Complete());
  }
  // Whole tokens are held to it too: none that would pass the bound.
  auto state = c->Start();
  WalkBytes(*state, "{\"a_long_member_name\": \"abc");
  for (int32_t t = 0; t < tokens_->vocab_size(); ++t) {
    if (!HasToken(state->AllowedNext(), t)) continue;
    const std::string& bytes = tokens_->Of(t);
    const std::string before = bytes.substr(0, bytes.find('"'));
    EXPECT_LE(std::count_if(before.begin(), before.end(), [](char b) { return (b & 0xC0) != 0x80; }), 2) << bytes;
  }
  // Without limits, the same schema takes the long value.
  auto free = Schema(schema, {});
  auto unlimited = free->Start();
  const std::string text = "{\"a_long_member_name\": \"abcdefgh\"}";
  EXPECT_EQ(WalkBytes(*unlimited, text), text);
}

TEST_F(JsonStringLimitsTest, AValueEndingInARepeatedUnitIsClosed) {
  auto c = Schema(R"({"type": "object", "properties": {"v": {"type": "string"}}})", {0, /*max_repeats=*/4});
  // "1." eight times (16 bytes): the next token must close the string.
  auto state = c->Start();
  EXPECT_EQ(WalkBytes(*state, "{\"v\": \"x1.1.1.1.1.1.1.1.1"), "{\"v\": \"x1.1.1.1.1.1.1.1.");
  EXPECT_TRUE(OnlyClosing(*state));
  // "1234567890" four times: closed after the fourth.
  state = c->Start();
  const std::string digits = "1234567890123456789012345678901234567890";
  EXPECT_EQ(WalkBytes(*state, "{\"v\": \"" + digits + "1"), "{\"v\": \"" + digits);
  // A short run is text ("1000", "aaa"); so is a unit repeated fewer times.
  state = c->Start();
  const std::string text = "{\"v\": \"10000 aaa abcabcabc\"}";
  EXPECT_EQ(WalkBytes(*state, text), text);
  EXPECT_TRUE(state->Complete());
}

TEST_F(JsonStringLimitsTest, AnArrayTakesNoMoreThanMaxItemRepeatsAlikeInARow) {
  auto c = Schema(R"({"type": "object", "properties": {"v": {"type": "array", "items": {}}}})",
                  {0, 0, /*max_item_repeats=*/3});
  // The third "1" may only close the array, or go on into another item.
  auto state = c->Start();
  EXPECT_EQ(WalkBytes(*state, "{\"v\": [1, 1, 1, 1]}"), "{\"v\": [1, 1, 1");
  EXPECT_EQ(WalkBytes(*state, "2, 1]}"), "2, 1]}");
  EXPECT_TRUE(state->Complete());
  // Whole tokens are held to it too: none that closes the third and goes on.
  state = c->Start();
  WalkBytes(*state, "{\"v\": [\"ab\", \"ab\", \"a");
  for (int32_t t = 0; t < tokens_->vocab_size(); ++t) {
    if (!HasToken(state->AllowedNext(), t)) continue;
    const std::string& bytes = tokens_->Of(t);
    EXPECT_NE(bytes.rfind("b\",", 0), 0u) << bytes;
    EXPECT_NE(bytes.rfind("b\", ", 0), 0u) << bytes;
  }
  EXPECT_TRUE(HasToken(state->AllowedNext(), ByteToken('b')));  // the item itself, then "]"
  EXPECT_EQ(WalkBytes(*state, "b\", \"ab\"]}"), "b\"");
  // Objects and nested arrays are items too; items alike but apart count
  // from one again.
  state = c->Start();
  const std::string objects = "{\"v\": [{\"a\": [1, 1]}, {\"a\": [1, 1]}, {\"a\": [1, 1]}, {\"a\": [1]}]}";
  EXPECT_EQ(WalkBytes(*state, objects), "{\"v\": [{\"a\": [1, 1]}, {\"a\": [1, 1]}, {\"a\": [1, 1]}");
  // Items that differ inside (nested arrays, arrays in objects) are not
  // alike, however deep the difference.
  state = c->Start();
  const std::string nested = "{\"v\": [[1, 2], [1, 3], [1, 4], {\"a\": [5]}, {\"a\": [6]}, {\"a\": [7]}]}";
  EXPECT_EQ(WalkBytes(*state, nested), nested);
  EXPECT_TRUE(state->Complete());
  state = c->Start();
  const std::string apart = "{\"v\": [\"x\", \"x\", \"y\", \"x\", \"x\", [\",\", 2], [\",\", 2]]}";
  EXPECT_EQ(WalkBytes(*state, apart), apart);
  EXPECT_TRUE(state->Complete());
}

TEST_F(JsonStringLimitsTest, WhereTheGrammarNeedsMoreItsMaskStands) {
  // minItems 4 beside max_item_repeats 2: the grammar's 4 come first.
  auto items = Schema(R"({"type": "array", "items": {"const": 0}, "minItems": 4})", {0, 0, 2});
  auto list = items->Start();
  EXPECT_EQ(WalkBytes(*list, "[0, 0, 0, 0, 0]"), "[0, 0, 0, 0");
  EXPECT_EQ(WalkBytes(*list, "]"), "]");
  EXPECT_TRUE(list->Complete());
  // minLength 8 beside max_length 3 (and repeats of "a"): the grammar's 8
  // come first, then the string closes as soon as it may.
  auto c = Schema(R"({"type": "string", "minLength": 8})", {/*max_length=*/3, /*max_repeats=*/2});
  auto state = c->Start();
  EXPECT_EQ(WalkBytes(*state, "\"aaaaaaaaaa\""), "\"aaaaaaaa");
  EXPECT_TRUE(OnlyClosing(*state));
  EXPECT_EQ(WalkBytes(*state, "\""), "\"");
  EXPECT_TRUE(state->Complete());
}

// A random model writes strings until max_tokens; with a limit every
// answer finishes, within the bound.
TEST_F(JsonStringLimitsTest, LimitedAnswersFinishWhereUnlimitedOnesRunOn) {
  auto backend = testing::CpuBackend();
  auto model = testing::ModelOn(*backend, *loaded_);
  EngineOptions o;
  o.scheduler.max_batch = 8;
  o.max_seq_len = 40;
  auto engine = testing::ValueOrDie(Engine::Create(*model, loaded_->tokenizer().get(), o), "engine");
  const std::string schema = R"({"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2})";
  auto run = [&](JsonStringLimits limits) {
    std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
    for (int seed = 0; seed < 6; ++seed) {
      Request r;
      r.prompt = testing::ValueOrDie(loaded_->tokenizer()->Encode("Data"), "prompt");
      r.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
      r.sampling.seed = seed;
      r.stop.max_new_tokens = 34;
      r.constraint = Schema(schema, limits);
      auto sink = std::make_shared<testing::CollectingSink>();
      EXPECT_TRUE(engine->Submit(r, sink).ok());
      sinks.push_back(sink);
    }
    int finished = 0;
    for (auto& sink : sinks) {
      EXPECT_TRUE(sink->Wait());
      if (sink->finish().reason == FinishReason::kLength) continue;
      ++finished;
      const nlohmann::json j = nlohmann::json::parse(sink->text(), nullptr, false);
      EXPECT_TRUE(j.is_array() && j.size() == 2) << sink->text();
      if (limits.max_length > 0 && j.is_array()) {
        for (const auto& s : j) {
          const std::string& v = s.get_ref<const std::string&>();
          const auto chars = std::count_if(v.begin(), v.end(), [](char c) { return (c & 0xC0) != 0x80; });
          EXPECT_LE(chars, limits.max_length) << v;
        }
      }
    }
    return finished;
  };
  EXPECT_LT(run({}), 6);  // some ran on: the limit has something to do
  EXPECT_EQ(run({/*max_length=*/4, 0}), 6);
}

}  // namespace
}  // namespace flover
