// JSON Schemas, regular expressions and grammars through xgrammar, on the
// tiny fixture (GPT-2's byte-level vocabulary, random weights, so outputs
// are whatever the mask lets through): every finished output parses and
// satisfies its constraint, greedy and sampled; refusals name the field;
// constrained requests fused with others equal their runs alone.
#include "engine/grammar_constraint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/engine.h"
#include "model/model_loader.h"
#include "chat/tool_calls.h"
#include "nlohmann/json.hpp"
#include "testing/backends.h"
#include "testing/collecting_sink.h"
#include "util/field_error.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::CollectingSink;

class GrammarConstraintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = testing::ValueOrDie(LoadModel("tests/golden/tiny_f32"), "tiny_f32");
    tokens_ = std::make_shared<TokenBytes>(*loaded_->tokenizer());
    grammars_ = std::make_unique<GrammarConstraints>(tokens_, loaded_->info().eos_token_ids);
    backend_ = testing::CpuBackend();
    model_ = testing::ModelOn(*backend_, *loaded_);
    EngineOptions o;
    o.scheduler.max_batch = 8;
    o.max_seq_len = 40;  // the fixture's positions
    engine_ = testing::ValueOrDie(Engine::Create(*model_, loaded_->tokenizer().get(), o), "engine");
  }
  std::vector<int32_t> Prompt() const {
    return testing::ValueOrDie(loaded_->tokenizer()->Encode("Data"), "prompt");
  }
  // Runs `constraint` with seeds 0 (greedy) .. n-1; returns the texts of
  // those that finished (stop or EOS); the rest ran out of room.
  std::vector<std::string> Outputs(std::shared_ptr<const CompiledConstraint> constraint, int n) {
    std::vector<std::string> out;
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (int seed = 0; seed < n; ++seed) {
      Request r;
      r.prompt = Prompt();
      r.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
      r.sampling.seed = seed;
      r.stop.max_new_tokens = 34;
      r.constraint = constraint;
      auto sink = std::make_shared<CollectingSink>();
      auto id = engine_->Submit(r, sink);
      EXPECT_TRUE(id.ok()) << id.status();
      if (!id.ok()) continue;
      sinks.push_back(sink);
    }
    for (auto& sink : sinks) {
      EXPECT_TRUE(sink->Wait());
      if (sink->finish().reason == FinishReason::kLength) {
        std::printf("did not finish within 34 tokens: %s\n", sink->text().c_str());
        continue;
      }
      EXPECT_THAT(sink->finish().reason, ::testing::AnyOf(FinishReason::kStop, FinishReason::kEos));
      out.push_back(sink->text());
    }
    return out;
  }

  std::unique_ptr<LoadedModel> loaded_;
  std::shared_ptr<const TokenBytes> tokens_;
  std::unique_ptr<GrammarConstraints> grammars_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<CausalLm> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(GrammarConstraintTest, JsonSchemaOutputsParseAndValidate) {
  auto c = grammars_->JsonSchema(
      R"({"type": "object", "properties": {"n": {"type": "string", "maxLength": 3},
          "a": {"type": "integer", "minimum": 0, "maximum": 150},
          "ok": {"type": "boolean"}},
          "required": ["n", "a", "ok"], "additionalProperties": false})",
      "json_schema");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> outs = Outputs(*c, 12);
  EXPECT_GE(outs.size(), 6u) << "most outputs should finish within 36 tokens";
  for (const std::string& text : outs) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    std::string hex;
    for (unsigned char ch : text) hex += absl::StrFormat("%02x ", ch);
    ASSERT_FALSE(j.is_discarded()) << text << " = " << hex;
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_EQ(j.size(), 3u) << text;
    ASSERT_TRUE(j["n"].is_string()) << text;
    EXPECT_LE(j["n"].get<std::string>().size(), 3u * 4) << text;  // 3 characters of UTF-8
    ASSERT_TRUE(j["a"].is_number_integer()) << text;
    EXPECT_GE(j["a"].get<int64_t>(), 0) << text;
    EXPECT_LE(j["a"].get<int64_t>(), 150) << text;
    EXPECT_TRUE(j["ok"].is_boolean()) << text;
  }
}

TEST_F(GrammarConstraintTest, RegexAndGrammarOutputsMatch) {
  auto regex = grammars_->Regex("[a-c]{3}-[0-9]{2}", "regex");
  ASSERT_TRUE(regex.ok()) << regex.status();
  std::vector<std::string> outs = Outputs(*regex, 8);
  EXPECT_EQ(outs.size(), 8u);
  for (const std::string& text : outs) {
    EXPECT_TRUE(std::regex_match(text, std::regex("[a-c]{3}-[0-9]{2}"))) << text;
  }
  auto grammar = grammars_->Grammar(R"(root ::= "yes" | "no" | "maybe " root)", "grammar");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  outs = Outputs(*grammar, 8);
  EXPECT_GE(outs.size(), 6u);
  for (const std::string& text : outs) {
    EXPECT_TRUE(std::regex_match(text, std::regex("(maybe )*(yes|no)"))) << text;
  }
  auto any = grammars_->AnyJson("response_format");
  ASSERT_TRUE(any.ok()) << any.status();
  for (const std::string& text : Outputs(*any, 6)) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(!j.is_discarded() && j.is_object()) << text;
  }
}

TEST_F(GrammarConstraintTest, RefusalsNameTheFieldAndSayWhy) {
  auto error = [](absl::StatusOr<std::shared_ptr<const CompiledConstraint>> c) {
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : ErrorField(c.status()) + "|" + std::string(c.status().message());
  };
  EXPECT_THAT(error(grammars_->JsonSchema("{not json", "json_schema")),
              HasSubstr("json_schema|json_schema: "));
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"type": "nosuchtype"})", "json_schema")),
              HasSubstr("nosuchtype"));
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"$ref": "#/nowhere"})", "json_schema")),
              HasSubstr("nowhere"));
  EXPECT_THAT(error(grammars_->Regex("(unclosed", "regex")), HasSubstr("regex|regex: "));
  EXPECT_THAT(error(grammars_->Grammar("root ::= ", "grammar")), HasSubstr("grammar|grammar: "));
  EXPECT_THAT(error(grammars_->Regex(std::string(kMaxRegexBytes + 1, 'a'), "regex")),
              HasSubstr("at most"));
  // Nesting that would overflow xgrammar's recursion (or take seconds to
  // convert) is refused before it gets there; quotes hide nothing in a regex.
  const std::string deep_schema = std::string(200, '[') + std::string(200, ']');
  EXPECT_THAT(error(grammars_->JsonSchema(deep_schema, "json_schema")), HasSubstr("nested deeper than 64"));
  std::string items = R"({"type": "integer"})";
  for (int i = 0; i < 70; ++i) items = R"({"type": "array", "items": )" + items + "}";
  EXPECT_THAT(error(grammars_->JsonSchema(items, "json_schema")), HasSubstr("nested deeper"));
  EXPECT_THAT(error(grammars_->Grammar("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')'),
                                       "grammar")),
              HasSubstr("parentheses nested deeper than 64"));
  EXPECT_THAT(error(grammars_->Regex("\"" + std::string(100, '(') + "a" + std::string(100, ')'), "regex")),
              HasSubstr("groups nested deeper than 64"));
  EXPECT_TRUE(grammars_->Regex("[(]{3}\\(", "regex").ok());  // a class and an escape are not groups
  // Keywords xgrammar would silently ignore are refused by name, wherever
  // they sit; a property that happens to be called "not" is fine.
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"type": "array", "uniqueItems": true})", "s")),
              HasSubstr("the keyword uniqueItems is not supported"));
  EXPECT_THAT(error(grammars_->JsonSchema(
                  R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})", "s")),
              HasSubstr("the keyword not"));
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})", "s")),
              HasSubstr("allOf"));
  EXPECT_TRUE(grammars_->JsonSchema(
                  R"({"type": "object", "properties": {"not": {"type": "string"}}, "uniqueItems": false})",
                  "s").ok());
  // Combinations xgrammar drops a part of.
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"type": "string", "pattern": "a+", "maxLength": 3})", "s")),
              HasSubstr("the keyword minLength / maxLength with pattern"));
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"type": "string", "format": "email", "minLength": 3})", "s")),
              HasSubstr("with format"));
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"type": "number", "multipleOf": 0.5})", "s")),
              HasSubstr("multipleOf (other than on an integer)"));
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"type": "integer", "multipleOf": 5, "maximum": 100})", "s")),
              HasSubstr("multipleOf (with minimum or maximum)"));
  EXPECT_TRUE(grammars_->JsonSchema(R"({"type": "integer", "multipleOf": 5})", "s").ok());
  EXPECT_TRUE(grammars_->JsonSchema(R"({"type": "string", "maxLength": 3})", "s").ok());
}

TEST_F(GrammarConstraintTest, FusedRequestsEqualTheirRunsAlone) {
  auto c = grammars_->JsonSchema(R"({"type": "array", "items": {"type": "integer"}, "maxItems": 3})",
                                 "json_schema");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<Request> requests;
  for (int seed = 0; seed < 6; ++seed) {
    Request r;
    r.prompt = Prompt();
    r.sampling.temperature = 1.2f;
    r.sampling.seed = seed;
    r.stop.max_new_tokens = 30;
    r.constraint = *c;
    requests.push_back(r);
  }
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : requests) {
    auto sink = std::make_shared<CollectingSink>();
    ASSERT_TRUE(engine_->Submit(r, sink).ok());
    ASSERT_TRUE(sink->Wait());
    alone.push_back(sink->tokens());
  }
  std::vector<std::shared_ptr<CollectingSink>> fused;
  for (const Request& r : requests) {
    fused.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(engine_->Submit(r, fused.back()).ok());
    Request free = r;
    free.constraint = nullptr;
    ASSERT_TRUE(engine_->Submit(free, std::make_shared<CollectingSink>()).ok());
  }
  for (size_t i = 0; i < fused.size(); ++i) {
    ASSERT_TRUE(fused[i]->Wait());
    EXPECT_EQ(fused[i]->tokens(), alone[i]) << i;
  }
}

// Whether `constraint` takes `text` (the tokenizer's tokens of it, one by
// one), and whether it is complete after it.
struct Walked {
  bool accepted = false, complete = false;
};
Walked Walk(const CompiledConstraint& constraint, const Tokenizer& tokenizer, const std::string& text) {
  std::unique_ptr<ConstraintState> state = constraint.Start();
  for (int32_t id : testing::ValueOrDie(tokenizer.Encode(text, false), "encode")) {
    if (!HasToken(state->AllowedNext(), id) || !state->Accept(id).ok()) return {};
  }
  return {true, state->Complete()};
}

// The tool-call grammars (chat/tool_calls.h's structural tags) hold a reply
// to its tool_choice: the named function with arguments that match its
// schema; with `required`, a call first; with `auto`, text until a call's
// marker; after one call, nothing more unless calls may be parallel.
TEST_F(GrammarConstraintTest, ToolCallGrammarsHoldTheChoice) {
  const std::vector<ToolFunction> tools = {
      {"f", "", R"({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})"},
      {"g", "", ""}};
  const Tokenizer& tok = *loaded_->tokenizer();
  auto compile = [&](ToolChoice choice, const std::string& named, bool parallel) {
    auto tag = ToolCallGrammar(ToolCallFormat::kHermes, tools, choice, named, parallel);
    EXPECT_TRUE(tag.ok()) << tag.status();
    auto c = grammars_->StructuralTag(*tag, "tool_choice");
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  };
  const std::string f_call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>";
  const std::string g_call = "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  auto named = compile(ToolChoice::kNamed, "f", true);
  EXPECT_TRUE(Walk(*named, tok, f_call).complete);
  EXPECT_FALSE(Walk(*named, tok, g_call).accepted);  // another function
  EXPECT_FALSE(Walk(*named, tok, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"3\"}}").accepted);
  EXPECT_FALSE(Walk(*named, tok, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"y\": 3").accepted);
  EXPECT_FALSE(Walk(*named, tok, "Sure").accepted);
  EXPECT_FALSE(Walk(*named, tok, f_call + f_call).accepted);

  auto required = compile(ToolChoice::kRequired, "", false);
  EXPECT_TRUE(Walk(*required, tok, g_call).complete);
  EXPECT_FALSE(Walk(*required, tok, "Sure " + f_call).accepted);
  EXPECT_FALSE(Walk(*required, tok, f_call + "\n" + g_call).accepted);  // not parallel
  EXPECT_FALSE(Walk(*required, tok, f_call.substr(0, 20)).complete);

  auto several = compile(ToolChoice::kRequired, "", true);
  EXPECT_TRUE(Walk(*several, tok, f_call).complete);
  EXPECT_TRUE(Walk(*several, tok, f_call + "\n" + g_call).complete);
  EXPECT_FALSE(Walk(*several, tok, f_call + " Done.").accepted);  // no text after calls

  auto single_auto = compile(ToolChoice::kAuto, "", false);
  EXPECT_TRUE(Walk(*single_auto, tok, "Let me see. " + f_call).complete);
  EXPECT_FALSE(Walk(*single_auto, tok, "Let me see. " + f_call + "\n" + g_call).accepted);

  auto automatic = compile(ToolChoice::kAuto, "", true);
  EXPECT_TRUE(Walk(*automatic, tok, "Plain words.").complete);
  EXPECT_TRUE(Walk(*automatic, tok, "Let me see. " + f_call + "\n" + g_call).complete);
  EXPECT_FALSE(Walk(*automatic, tok, "Let me see. " + f_call + " Done.").accepted);
  EXPECT_FALSE(Walk(*automatic, tok, "Let me see. <tool_call>\n{\"name\": \"h\"").accepted);
  EXPECT_FALSE(Walk(*automatic, tok, "Let me see. " + f_call.substr(0, 30)).complete);
}

}  // namespace
}  // namespace flover
