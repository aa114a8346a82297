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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chat/tool_calls.h"
#include "engine/engine.h"
#include "engine/token_then_constraint.h"
#include "model/model_loader.h"
#include "nlohmann/json.hpp"
#include "testing/backends.h"
#include "testing/collecting_sink.h"
#include "testing/files.h"
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
  EXPECT_THAT(error(grammars_->JsonSchema(R"({"allOf": [{"type": "string", "pattern": "^a"}, {"pattern": "b$"}]})",
                                          "s")),
              HasSubstr("allOf"));  // two patterns are not one
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

// With speculative decoding, a constrained sequence drafts what its
// grammar fixes next (a schema's keys and punctuation, as the tokenizer
// spells them) or an n-gram's guess, and verifies each row under the mask
// of the rows before it: greedy and seeded outputs and logprobs, fused, equal
// the same requests that do not speculate, and drafts were both taken and
// refused (the tiny model's random weights often spell a key otherwise).
TEST_F(GrammarConstraintTest, SpeculationDraftsWhatTheGrammarFixesAndChangesNothing) {
  EngineOptions o;
  o.scheduler.max_batch = 16;
  o.max_seq_len = 40;
  o.speculative.mode = SpeculativeMode::kNgram;
  o.speculative.min_ngram = 1;
  auto engine = testing::ValueOrDie(Engine::Create(*model_, loaded_->tokenizer().get(), o), "engine");
  std::vector<std::shared_ptr<const CompiledConstraint>> constraints;
  for (const char* schema : {R"({"type": "object", "properties": {"alpha": {"type": "integer"},
                                   "beta": {"type": "boolean"}, "gamma": {"enum": ["left", "right"]}},
                                 "required": ["alpha", "beta", "gamma"], "additionalProperties": false})",
                             R"({"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3})"}) {
    constraints.push_back(testing::ValueOrDie(grammars_->JsonSchema(schema, "json_schema"), "schema"));
  }
  std::vector<Request> requests;
  for (int seed = 0; seed < 8; ++seed) {
    Request r;
    r.prompt = Prompt();
    r.sampling.temperature = seed % 4 == 0 ? 0.0f : 1.0f;
    r.sampling.seed = seed;
    r.stop.max_new_tokens = 34;
    r.return_logprobs = true;
    r.top_logprobs = 2;
    r.constraint = constraints[seed % 2];
    requests.push_back(r);
  }
  auto run = [&](bool speculative) {
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (Request r : requests) {
      r.speculative = speculative;
      sinks.push_back(std::make_shared<CollectingSink>());
      EXPECT_TRUE(engine->Submit(r, sinks.back()).ok());
    }
    for (auto& sink : sinks) EXPECT_TRUE(sink->Wait());
    return sinks;
  };
  const auto plain = run(false);
  const EngineStats before = engine->Stats();
  EXPECT_EQ(before.draft_tokens, 0);
  const auto drafted = run(true);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(drafted[i]->tokens(), plain[i]->tokens()) << i;
    EXPECT_EQ(drafted[i]->logprobs(), plain[i]->logprobs()) << i;
    EXPECT_EQ(drafted[i]->top_logprobs(), plain[i]->top_logprobs()) << i;
    EXPECT_EQ(drafted[i]->finish().reason, plain[i]->finish().reason) << i;
  }
  const EngineStats stats = engine->Stats();
  std::printf("%lld draft tokens verified, %lld taken\n", static_cast<long long>(stats.draft_tokens),
              static_cast<long long>(stats.accepted_tokens));
  EXPECT_GT(stats.accepted_tokens, 0);
  EXPECT_LT(stats.accepted_tokens, stats.draft_tokens);
}

// Whether `constraint` takes `text` (the tokenizer's tokens of it, one by
// one), and whether it is complete after it.
struct Walked {
  bool accepted = false, complete = false;
};
Walked WalkIds(const CompiledConstraint& constraint, const std::vector<int32_t>& ids) {
  std::unique_ptr<ConstraintState> state = constraint.Start();
  for (int32_t id : ids) {
    if (!HasToken(state->AllowedNext(), id) || !state->Accept(id).ok()) return {};
  }
  return {true, state->Complete()};
}
Walked Walk(const CompiledConstraint& constraint, const Tokenizer& tokenizer, const std::string& text) {
  return WalkIds(constraint, testing::ValueOrDie(tokenizer.Encode(text, false), "encode"));
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
    auto c = grammars_->StructuralTag(tag->structural_tag, "tool_choice");
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

// A tokenizer that reads one more id as a special token (whose bytes no
// text spells), as Mistral's tokenizer holds [TOOL_CALLS].
class WithSpecialToken : public Tokenizer {
 public:
  WithSpecialToken(const Tokenizer& base, int32_t special) : base_(base), special_(special) {}
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, bool add_special_tokens) const override {
    return base_.Encode(text, add_special_tokens);
  }
  bool IsSpecial(int32_t id) const override { return id == special_ || base_.IsSpecial(id); }
  std::string DecodeBytes(absl::Span<const int32_t> ids) const override { return base_.DecodeBytes(ids); }
  std::string Decode(absl::Span<const int32_t> ids) const override { return base_.Decode(ids); }
  int vocab_size() const override { return base_.vocab_size(); }
  std::unique_ptr<TextStream> NewTextStream() const override { return base_.NewTextStream(); }

 private:
  const Tokenizer& base_;
  const int32_t special_;
};

// Mistral's calls, [TOOL_CALLS] [{"name": ..., "arguments": ...}, ...]:
// where the vocabulary holds the marker as a special token, which no text
// spells, the reply starts with that token (TokenThen), and with `auto` the
// calls start when the model samples it; where it does not, the marker is
// text like hermes'.
TEST_F(GrammarConstraintTest, MistralCallsStartWithTheMarkerToken) {
  const std::vector<ToolFunction> tools = {
      {"f", "", R"({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})"},
      {"g", "", ""}};
  const Tokenizer& base = *loaded_->tokenizer();
  const int32_t marker = base.vocab_size() - 2;  // any id: read as special from here on
  WithSpecialToken tok(base, marker);
  GrammarConstraints grammars(std::make_shared<TokenBytes>(tok), loaded_->info().eos_token_ids);
  auto compile = [&](ToolChoice choice, const std::string& named, bool parallel, int32_t marker_token) {
    auto tag = ToolCallGrammar(ToolCallFormat::kMistral, tools, choice, named, parallel, marker_token);
    EXPECT_TRUE(tag.ok()) << tag.status();
    auto c = grammars.StructuralTag(tag->structural_tag, "tool_choice");
    EXPECT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(tag->after_token, marker_token);
    return tag->after_token < 0 ? *c : TokenThen(tag->after_token, tag->text_before, *c);
  };
  auto ids = [&](const std::string& text) { return testing::ValueOrDie(tok.Encode(text, false), "encode"); };
  auto after = [&](std::vector<int32_t> first, const std::string& text) {
    for (int32_t id : ids(text)) first.push_back(id);
    return first;
  };
  const std::string f = "{\"name\": \"f\", \"arguments\": {\"x\": 3}}";
  const std::string g = "{\"name\": \"g\", \"arguments\": {}}";

  auto named = compile(ToolChoice::kNamed, "f", true, marker);
  EXPECT_TRUE(WalkIds(*named, after({marker}, " [" + f + "]")).complete);
  EXPECT_FALSE(WalkIds(*named, after({marker}, " [" + f + ", " + f + "]")).accepted);  // named: one call
  EXPECT_FALSE(WalkIds(*named, after({marker}, " [" + g + "]")).accepted);
  EXPECT_FALSE(Walk(*named, tok, "[TOOL_CALLS] [" + f + "]").accepted);  // the marker's text is not it
  EXPECT_FALSE(WalkIds(*named, after({marker}, " [" + f)).complete);

  auto required = compile(ToolChoice::kRequired, "", true, marker);
  EXPECT_TRUE(WalkIds(*required, after({marker}, " [" + g + ", " + f + "]")).complete);
  EXPECT_FALSE(WalkIds(*required, after({marker}, " [" + g + "] Done.")).accepted);  // nothing after the list
  EXPECT_FALSE(Walk(*required, tok, "Sure").accepted);
  auto one = compile(ToolChoice::kRequired, "", false, marker);
  EXPECT_TRUE(WalkIds(*one, after({marker}, " [" + g + "]")).complete);
  EXPECT_FALSE(WalkIds(*one, after({marker}, " [" + g + ", " + f)).accepted);  // not parallel

  auto automatic = compile(ToolChoice::kAuto, "", true, marker);
  EXPECT_TRUE(Walk(*automatic, tok, "Plain words.").complete);
  EXPECT_TRUE(WalkIds(*automatic, after(ids("Let me see."), "")).complete);
  std::vector<int32_t> text_then_call = ids("Let me see.");
  text_then_call.push_back(marker);
  EXPECT_TRUE(WalkIds(*automatic, after(text_then_call, " [" + f + ", " + g + "]")).complete);
  EXPECT_FALSE(WalkIds(*automatic, after(text_then_call, " [{\"name\": \"h\"")).accepted);
  EXPECT_FALSE(WalkIds(*automatic, after(text_then_call, " [" + f)).complete);

  // No such token in the vocabulary: the marker is text.
  auto as_text = compile(ToolChoice::kAuto, "", false, -1);
  EXPECT_TRUE(Walk(*as_text, tok, "Let me see. [TOOL_CALLS] [" + g + "]").complete);
  EXPECT_FALSE(Walk(*as_text, tok, "Let me see. [TOOL_CALLS] [" + g + ", " + f + "]").accepted);
  EXPECT_TRUE(Walk(*as_text, tok, "Plain words.").complete);
}

// Gemma 4's calls (<|tool_call>call:f{key:value}<tool_call|>, in its
// template's notation): the grammar built from each schema takes the call
// Google's template renders for those arguments (calls.json, rendered by
// transformers) and refuses calls that break the schema or the order the
// template writes keys in.
TEST_F(GrammarConstraintTest, Gemma4CallGrammarsTakeWhatTheTemplateWrites) {
  const nlohmann::json cases =
      nlohmann::json::parse(testing::ReadFileOrEmpty("tests/golden/gemma4_chat/calls.json"))["cases"];
  ASSERT_GE(cases.size(), 8u);
  const Tokenizer& tok = *loaded_->tokenizer();
  auto compile = [&](const std::vector<ToolFunction>& tools, ToolChoice choice, const std::string& named,
                     bool parallel) {
    auto tag = ToolCallGrammar(ToolCallFormat::kGemma4, tools, choice, named, parallel);
    EXPECT_TRUE(tag.ok()) << tag.status();
    auto c = grammars_->StructuralTag(tag->structural_tag, "tool_choice");
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  };
  for (const nlohmann::json& c : cases) {
    const std::vector<ToolFunction> tools = {{c["function"], "", c["parameters"].dump()}};
    const std::string call = c["rendered"];
    EXPECT_TRUE(Walk(*compile(tools, ToolChoice::kNamed, c["function"], false), tok, call).complete) << call;
    EXPECT_TRUE(Walk(*compile(tools, ToolChoice::kAuto, "", true), tok, "Sure. " + call + call).complete) << call;
  }
  const std::vector<ToolFunction> tools = {
      {"f", "", R"({"type": "object", "properties": {"n": {"type": "integer"}, "Mode": {"enum": ["a", "b"]},
                   "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["n"]})"},
      {"g", "", ""}};
  const std::string q = "<|\"|>";
  auto required = compile(tools, ToolChoice::kRequired, "", false);
  EXPECT_TRUE(Walk(*required, tok, "<|tool_call>call:f{n:3}<tool_call|>").complete);
  EXPECT_TRUE(Walk(*required, tok, "<|tool_call>call:f{Mode:" + q + "b" + q + ",n:-7,tags:[" + q + "x < y" + q + "]}<tool_call|>")
                  .complete);
  EXPECT_TRUE(Walk(*required, tok, "<|tool_call>call:g{any:{k:[1,null]}}<tool_call|>").complete);
  for (const std::string& bad : std::vector<std::string>{"<|tool_call>call:f{}<tool_call|>",                        // n is required
                                "<|tool_call>call:f{n:3,Mode:" + q + "b" + q + "}",        // keys out of order
                                "<|tool_call>call:f{n:" + q + "3" + q + "}",               // a string, not a number
                                "<|tool_call>call:f{n:3,x:1}",                             // no such property
                                "<|tool_call>call:f{Mode:" + q + "c" + q,                   // not in the enum
                                "<|tool_call>call:f{n:3,tags:[" + q + "a<|b",              // "<|" inside a string
                                "<|tool_call>call:h{}", "Sure <|tool_call>call:f{n:3}<tool_call|>"}) {
    EXPECT_FALSE(Walk(*required, tok, bad).accepted) << bad;
  }
  EXPECT_FALSE(Walk(*required, tok, "<|tool_call>call:f{n:3}<tool_call|><|tool_call>call:g{}").accepted);  // one call

  // Gemma 4's vocabulary holds the markers as special tokens: where the
  // format asks for them (ToolCallSpecialTexts), they spell their text.
  const int32_t quote = tok.vocab_size() - 2;
  class QuoteToken : public WithSpecialToken {
   public:
    QuoteToken(const Tokenizer& base, int32_t id) : WithSpecialToken(base, id), id_(id) {}
    std::string DecodeBytes(absl::Span<const int32_t> ids) const override {
      std::string out;
      for (int32_t id : ids) out += id == id_ ? std::string("<|\"|>") : WithSpecialToken::DecodeBytes({id});
      return out;
    }

   private:
    const int32_t id_;
  } special(tok, quote);
  auto ids = [&](const std::string& text) { return testing::ValueOrDie(tok.Encode(text, false), "encode"); };
  std::vector<int32_t> with_token = ids("<|tool_call>call:f{n:1,tags:[");
  with_token.push_back(quote);
  for (int32_t id : ids("x")) with_token.push_back(id);
  with_token.push_back(quote);
  std::vector<int32_t> tail = ids("]}<tool_call|>");
  with_token.insert(with_token.end(), tail.begin(), tail.end());
  for (bool spelled : {false, true}) {
    GrammarConstraints grammars(
        std::make_shared<TokenBytes>(special, spelled ? ToolCallSpecialTexts(ToolCallFormat::kGemma4)
                                                      : std::vector<std::string>{}),
        loaded_->info().eos_token_ids);
    auto tag = ToolCallGrammar(ToolCallFormat::kGemma4, {tools[0]}, ToolChoice::kRequired, "", false);
    ASSERT_TRUE(tag.ok());
    auto c = grammars.StructuralTag(tag->structural_tag, "tool_choice");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(WalkIds(**c, with_token).complete, spelled);
  }
  EXPECT_TRUE(ToolCallSpecialTexts(ToolCallFormat::kHermes).empty());
}

// What xgrammar 0.2.8 would drop of a JSON Schema is refused (issue 37),
// naming the keyword and its JSON pointer; the schemas beside each that it
// does enforce stay accepted, and enforced.
class JsonSchemaRefusalTest : public GrammarConstraintTest {
 protected:
  // The refusal's message ("" if accepted), the same for a tool's parameters.
  std::string Refusal(const std::string& schema) {
    const absl::Status checked = CheckJsonSchema(schema, "json_schema");
    auto compiled = grammars_->JsonSchema(schema, "json_schema");
    EXPECT_EQ(checked.ok(), compiled.ok()) << schema;
    if (compiled.ok()) return "";
    EXPECT_EQ(checked.message(), compiled.status().message());
    EXPECT_EQ(ErrorField(compiled.status()), "json_schema");
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(compiled.status().message());
  }
  // Accepted, taking each of `valid` (compact JSON) to its end and none of
  // `invalid`.
  void ExpectEnforced(const std::string& schema, const std::vector<std::string>& valid,
                      const std::vector<std::string>& invalid) {
    auto c = grammars_->JsonSchema(schema, "json_schema");
    ASSERT_TRUE(c.ok()) << schema << ": " << c.status();
    const Tokenizer& tok = *loaded_->tokenizer();
    for (const std::string& text : valid) EXPECT_TRUE(Walk(**c, tok, text).complete) << schema << " " << text;
    for (const std::string& text : invalid) EXPECT_FALSE(Walk(**c, tok, text).complete) << schema << " " << text;
  }
};

TEST_F(JsonSchemaRefusalTest, SiblingsOfRefAnyOfOneOfAllOfAreMergedIntoTheBranches) {
  // xgrammar keeps only the first of $ref, const, enum, anyOf, oneOf, allOf
  // and type in a schema object: the others are merged into each branch,
  // the $ref's target or the allOf's one schema, and enforced there.
  ExpectEnforced(R"({"anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 3})",
                 {"3", "\"s\""}, {"2", "null"});
  ExpectEnforced(R"({"type": "object", "properties": {"p": {"type": "object",
                     "additionalProperties": false, "anyOf": [{"type": "object"}]}}})",
                 {R"({"p": {}})"}, {R"({"p": {"x": 1}})"});
  ExpectEnforced(R"({"$defs": {"list": {"type": "array"}}, "$ref": "#/$defs/list", "maxItems": 1})",
                 {"[1]", "[]"}, {"[1, 2]", "{}"});
  ExpectEnforced(R"({"allOf": [{"type": "string"}], "maxLength": 2})", {"\"ab\""}, {"\"abc\"", "1"});
  ExpectEnforced(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                               {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
                 {R"({"a": 1, "b": "x"})", R"({"b": "x"})"}, {R"({"a": 1})", R"({"a": "x", "b": "x"})"});
  ExpectEnforced(R"({"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
                     "additionalProperties": false,
                     "oneOf": [{"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}},
                               {"properties": {"kind": {"const": "b"}}}]})",
                 {R"({"kind": "a"})", R"({"kind": "b"})"}, {R"({"kind": "c"})", R"({"kind": "a", "y": 1})", "{}"});
  // A branch with keywords but no type reads as any JSON: split by type.
  ExpectEnforced(R"({"anyOf": [{"type": "null"}, {"required": ["a"]}]})",
                 {"null", R"({"a": 1})", "3"}, {"{}"});
  // Merged oneOf branches still must be exclusive: here each forbids the
  // other's member (a member only required, b, is listed with any value).
  ExpectEnforced(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                     "oneOf": [{"required": ["a"]}, {"required": ["b"]}]})",
                 {R"({"a": 1})", R"({"b": "x"})"}, {R"({"a": 1, "b": 2})", "{}", R"({"b": 1, "a": 2})"});
  EXPECT_THAT(Refusal(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                          "oneOf": [{"required": ["a"]}, {"properties": {"b": {"type": "string"}}}]})"),
              HasSubstr("json_schema: the keyword oneOf (with branches not provably exclusive) is not supported at "
                        "#/oneOf"));
  // Keywords that cannot be one (two patterns) keep the refusal.
  EXPECT_THAT(Refusal(R"({"type": "string", "pattern": "^a", "allOf": [{"pattern": "b$"}]})"),
              HasSubstr("beside allOf is not supported"));

  // Annotations beside them are fine; so is a keyword every branch repeats
  // or implies (a type, by its properties), and a branch that is any JSON.
  ExpectEnforced(R"({"title": "T", "description": "d", "default": null, "examples": [1], "$comment": "c",
                     "deprecated": false, "readOnly": false, "writeOnly": false,
                     "anyOf": [{"type": "integer"}, {"type": "null"}]})",
                 {"3", "null"}, {"\"3\"", "true"});
  ExpectEnforced(R"({"type": "object", "anyOf": [
                       {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                       {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
                 {R"({"a": 1})", R"({"b": "x"})"}, {R"({"c": 1})", R"({"a": "x"})", "[]", "3"});
  ExpectEnforced(R"({"type": "string", "maxLength": 5,
                     "anyOf": [{"enum": ["ab", "cd"]}, {"type": "string", "maxLength": 3}]})",
                 {"\"ab\"", "\"xyz\""}, {"\"abcd\"", "3"});
  ExpectEnforced(R"({"$defs": {"M": {"type": "object", "properties": {"x": {"type": "integer"}},
                                     "required": ["x"], "additionalProperties": false}},
                     "anyOf": [{"$ref": "#/$defs/M"}, {"type": "null"}], "default": null, "title": "M"})",
                 {R"({"x": 1})", "null"}, {"{}", R"({"x": 1, "y": 2})"});
  ExpectEnforced(R"({"anyOf": [{"type": "integer"}, {}]})", {"3", "\"s\"", "[]"}, {});
  // Before 2019-09 the standard ignored a $ref's siblings too.
  ExpectEnforced(R"({"$schema": "http://json-schema.org/draft-07/schema#",
                     "definitions": {"list": {"type": "array", "items": {"type": "integer"}}},
                     "type": "object", "properties": {"l": {"$ref": "#/definitions/list", "maxItems": 1}}})",
                 {R"({"l": [1, 2]})"}, {R"({"l": ["x"]})"});
}

TEST_F(JsonSchemaRefusalTest, EnumOrConstBesideKeywordsKeepTheValuesThatPass) {
  // The listed values are checked against the keywords beside them (a
  // validator for values: types, bounds, patterns, not, if/then/else,
  // nested schemas); those that fail are dropped, and the keywords with
  // them.
  ExpectEnforced(R"({"type": "object", "properties": {"role": {"type": "string", "enum": ["a", null]}}})",
                 {R"({"role": "a"})"}, {R"({"role": null})"});
  EXPECT_THAT(Refusal(R"({"type": "integer", "const": 3, "minimum": 5})"),
              HasSubstr("json_schema: no value is valid under this schema"));
  ExpectEnforced(R"({"type": "string", "enum": ["abc", "bcd"], "pattern": "^a"})", {"\"abc\""}, {"\"bcd\""});
  ExpectEnforced(R"({"allOf": [{"enum": [1, "x", [1, 2]]}, {"not": {"type": "string"}}]})",
                 {"1", "[1, 2]"}, {"\"x\"", "[1]", "[1, 2, 3]"});
  ExpectEnforced(R"({"enum": [{"a": 1}, {"a": 2}], "if": {"properties": {"a": {"const": 1}}},
                     "then": false})",
                 {R"({"a": 2})"}, {R"({"a": 1})", R"({"a": 2, "b": 1})"});
  // A member no listed value can be: never generated (nor any member not
  // named, which xgrammar cannot tell from it).
  ExpectEnforced(R"({"type": "object", "properties": {"a": {"type": "object", "enum": ["x"]},
                                                     "b": {"type": "integer"}}})",
                 {R"({"b": 1})", "{}"}, {R"({"a": "x"})", R"({"a": {}})"});
  EXPECT_THAT(Refusal(R"({"type": "object", "properties": {"a": {"type": "object", "enum": ["x"]}},
                          "required": ["a"]})"),
              HasSubstr("no value is valid under this schema"));
  // A pattern a backtracking matcher could take exponential time on is not
  // tried on the values (a request must not stall the server): refused.
  EXPECT_THAT(Refusal(R"({"type": "string", "pattern": "^(a+)+$",
                          "enum": ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"]})"),
              HasSubstr("the keyword pattern beside enum"));
  // A format it cannot decide for a value keeps the refusal.
  EXPECT_THAT(Refusal(R"({"type": "string", "enum": ["x"], "format": "email", "anyOf": [{"type": "string"}]})"),
              HasSubstr("the keyword format beside enum"));
  ExpectEnforced(R"({"enum": ["a", 1, null]})", {"\"a\"", "1", "null"}, {"\"b\"", "2"});
  ExpectEnforced(R"({"type": "string", "enum": ["red", "green"], "maxLength": 5, "description": "c"})",
                 {"\"red\"", "\"green\""}, {"\"blue\"", "3"});
  ExpectEnforced(R"({"type": ["string", "null"], "enum": [null], "pattern": "^a"})",
                 {"null"}, {"\"a\""});  // a pattern passes what is not a string
  ExpectEnforced(R"({"type": "number", "const": 2, "minimum": 1, "multipleOf": 2})", {"2"}, {"3"});
}

TEST_F(JsonSchemaRefusalTest, ValidationKeywordsWithoutTypePropertiesOrItemsAreSplitByType) {
  // Without type, properties or items, xgrammar reads a schema as any JSON:
  // the keywords go to a branch of the type each constrains, beside one
  // for every other type.
  ExpectEnforced(R"({"required": ["a"]})", {R"({"a": 1})", "3", "\"s\""}, {"{}"});
  ExpectEnforced(R"({"type": "object", "properties": {"x": {"pattern": "^a"}}})",
                 {R"({"x": "ab"})", R"({"x": 3})"}, {R"({"x": "b"})"});
  ExpectEnforced(R"({"type": "object", "properties": {"d": {"format": "date-time"}}})",
                 {R"({"d": "2024-01-01T00:00:00Z"})", R"({"d": 1})"}, {R"({"d": "x"})"});
  ExpectEnforced(R"({"minimum": 0})", {"0", "\"s\"", "null"}, {"-1"});
  // Properties or items say what it is; annotations, unknown keywords and
  // keywords that ask for nothing are fine.
  ExpectEnforced(R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})",
                 {R"({"a": 1})"}, {"{}", R"({"a": "1"})"});
  ExpectEnforced(R"({"items": {"type": "integer"}, "maxItems": 2})", {"[1, 2]"}, {"[1, 2, 3]", "[\"a\"]"});
  ExpectEnforced(R"({"description": "anything", "nullable": true, "x-extra": 1, "required": [], "minLength": 0})",
                 {"3", "\"s\"", "{}"}, {});
}

TEST_F(JsonSchemaRefusalTest, RequiredMembersNotInPropertiesAreListed) {
  // Listed with the schema additionalProperties gives a member (any value
  // where it gives none).
  ExpectEnforced(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]})",
                 {R"({"a": 1, "b": 2})"}, {R"({"a": 1})"});
  ExpectEnforced(R"({"type": "object", "additionalProperties": {"type": "string"}, "required": ["k"]})",
                 {R"({"k": "v"})"}, {R"({"k": 1})", "{}"});
  ExpectEnforced(R"({"type": "array", "items": {"type": "object", "required": ["x"]}})",
                 {R"([{"x": 1}])"}, {"[{}]"});
  // With no other member allowed, the object is impossible: still refused.
  EXPECT_THAT(Refusal(R"({"type": "object", "properties": {"a": {}}, "required": ["b"],
                          "additionalProperties": false})"),
              HasSubstr("required (naming \"b\", not in properties) is not supported at #/required"));
  ExpectEnforced(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                     "required": ["a"], "additionalProperties": false})",
                 {R"({"a": 1})", R"({"a": 1, "b": "x"})"}, {R"({"b": "x"})", R"({"a": 1, "c": 2})"});
  // required beside a type that is not object constrains nothing.
  ExpectEnforced(R"({"type": "string", "required": ["a"]})", {"\"s\""}, {"{}"});
}

// JSON Schema searches a pattern in the string; xgrammar matches the whole
// string: an end not anchored takes any text there.
TEST_F(JsonSchemaRefusalTest, PatternsAreSearchedAsTheStandardSays) {
  ExpectEnforced(R"({"type": "string", "pattern": "^ab"})", {"\"ab\"", "\"abc\""}, {"\"xab\""});
  ExpectEnforced(R"({"type": "string", "pattern": "[0-9]$"})", {"\"x1\"", "\"1\""}, {"\"1x\""});
  ExpectEnforced(R"({"type": "string", "pattern": "cat|dog"})", {"\"a dog!\"", "\"cat\""}, {"\"cow\""});
  ExpectEnforced(R"({"type": "string", "pattern": "^[a-z]+$"})", {"\"abc\""}, {"\"abc1\""});
  // Rewritten once, wherever the pattern sits (a branch, merged with the
  // keywords beside it, is rewritten again).
  ExpectEnforced(R"({"type": "string", "anyOf": [{"enum": ["a", "b"]}, {"type": "string", "pattern": "^c-[a-z-]*$"}]})",
                 {"\"c-ab\"", "\"a\""}, {"\"c-Ab\"", "\"xc-ab\""});
}

// Lengths beside a pattern of one character (class) repeated become that
// class repeated within both bounds; patternProperties are held to their
// schemas (and additionalProperties false: only named members or members a
// pattern matches are generated); a dependency of a required member is
// required, of another an anyOf of the object without it and with both.
TEST_F(JsonSchemaRefusalTest, LengthsBesidePatternsPatternPropertiesAndDependenciesAreEnforced) {
  ExpectEnforced(R"({"type": "string", "pattern": "^[a-z0-9_]+$", "minLength": 2, "maxLength": 4})",
                 {"\"ab\"", "\"a_1z\""}, {"\"a\"", "\"abcde\"", "\"AB\""});
  ExpectEnforced(R"({"type": "string", "pattern": "^\\d{2,8}$", "maxLength": 3})", {"\"123\""},
                 {"\"1234\"", "\"1\""});
  ExpectEnforced(R"({"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "maxLength": 5})",
                 {"\"a-b1\"", "\"abcde\"", "\"a\""}, {"\"abcdef\"", "\"1abc\""});
  ExpectEnforced(R"({"type": "string", "pattern": "^\\d{3}-\\d+$", "minLength": 6})", {"\"123-45\""},
                 {"\"123-4\""});
  ExpectEnforced(R"({"type": "string", "pattern": "^ab?c$", "minLength": 3})", {"\"abc\""}, {"\"ac\""});
  EXPECT_THAT(Refusal(R"({"type": "string", "pattern": "^a.b$", "maxLength": 2})"),
              HasSubstr("no value is valid"));
  EXPECT_THAT(Refusal(R"({"type": "string", "pattern": "^a+b+$", "maxLength": 3})"),
              HasSubstr("minLength / maxLength with pattern"));
  ExpectEnforced(R"({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}})",
                 {R"({"x-a": 1})", "{}"}, {R"({"x-a": "s"})"});
  ExpectEnforced(R"({"type": "object", "properties": {"x-id": {"type": "number"}, "name": {"type": "string"}},
                     "patternProperties": {"^x-": {"type": "integer"}, "^x-i": {"minimum": 3}}})",
                 {R"({"x-id": 4, "name": "n"})", R"({"x-b": 3})"},
                 {R"({"x-id": 1.5})", R"({"x-id": 2})", R"({"x-b": "s"})", R"({"x-ib": 1})"});
  // A key pattern with a lookaround, which xgrammar skips, is refused
  // (MaskBench's browser.i18n: "^(?!@@)[@a-zA-Z0-9_-]+$" took "@@reserved").
  EXPECT_THAT(Refusal(R"({"type": "object", "patternProperties": {"^(?!@@)[@a-z]+$": {"type": "string"}},
                          "additionalProperties": false})"),
              HasSubstr("the keyword patternProperties is not supported at #/patternProperties"));
  // xgrammar may write a named member through a pattern it matches: the
  // pattern's values are held to the member's schema too.
  ExpectEnforced(R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-f]{4}$"}},
                     "patternProperties": {"^[a-z]{1,300}$": {"type": ["string", "integer"]}}})",
                 {R"({"id": "abcd"})", R"({"key": "bcde"})"}, {R"({"id": "abc"})", R"({"id": 3})"});
  ExpectEnforced(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                     "required": ["a"], "dependentRequired": {"a": ["b"]}})",
                 {R"({"a": 1, "b": 2})"}, {R"({"a": 1})"});
  // Of a member not required: the object without it, or with it and its
  // dependencies (a schema's merged).
  ExpectEnforced(R"({"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}})",
                 {R"({"a": 1, "b": 2})", R"({"b": 2})", "{}"}, {R"({"a": 1})"});
  ExpectEnforced(R"({"type": "object", "properties": {"a": {"type": "integer"}, "c": {"type": "string"}},
                     "dependentSchemas": {"a": {"properties": {"c": {"const": "x"}}, "required": ["c"]}}})",
                 {R"({"a": 1, "c": "x"})", R"({"c": "y"})"}, {R"({"a": 1})", R"({"a": 1, "c": "y"})"});
  ExpectEnforced(R"({"type": "array", "uniqueItems": true, "maxItems": 1})", {"[1]"}, {"[1, 1]"});
}

TEST_F(JsonSchemaRefusalTest, PatternBesideAFormatXgrammarChecksIsRefused) {
  EXPECT_THAT(Refusal(R"({"type": "string", "format": "date", "pattern": "^2024"})"),
              HasSubstr("the keyword pattern with format is not supported at #/pattern "
                        "(it would not be enforced: xgrammar enforces only the format)"));
  // The format alone, and a pattern beside a format the standard does not
  // define (an annotation), are enforced.
  ExpectEnforced(R"({"type": "string", "format": "date"})", {"\"2024-01-31\""}, {"\"2024-13-01\"", "\"x\""});
  ExpectEnforced(R"({"type": "string", "format": "my-id", "pattern": "^[a-c]+$"})", {"\"abc\""}, {"\"abd\""});
  // xgrammar's regexes skip lookarounds; one inside a class is a character.
  EXPECT_THAT(Refusal(R"({"type": "object", "properties": {"pw": {"type": "string",
                          "pattern": "^(?=.*[0-9])[a-z0-9]{3}$"}}})"),
              HasSubstr("the keyword pattern (with a lookahead or lookbehind) is not supported at "
                        "#/properties/pw/pattern (it would not be enforced: xgrammar matches as if it were not "
                        "there)"));
  EXPECT_THAT(Refusal(R"({"type": "string", "pattern": "^a(?<!b)$"})"), HasSubstr("lookahead or lookbehind"));
  ExpectEnforced(R"({"type": "string", "pattern": "^[(?=]\\(?!$"})", {"\"?(!\""}, {"\"a(!\""});
}

TEST_F(JsonSchemaRefusalTest, RefsOtherThanLocalJsonPointersAreRefused) {
  EXPECT_THAT(Refusal(R"({"$defs": {"a": {"$anchor": "a", "type": "string"}},
                          "type": "object", "properties": {"x": {"$ref": "#a"}}})"),
              HasSubstr("the keyword $ref \"#a\" is not supported at #/properties/x/$ref (it would not be "
                        "enforced: only \"#\" and JSON pointers from \"#/\" are resolved; it would match any JSON "
                        "value)"));
  EXPECT_THAT(Refusal(R"({"$ref": "other.json#/a"})"), HasSubstr("the keyword $ref \"other.json#/a\""));
  // What a $ref names is checked where it is, once (recursion included).
  EXPECT_THAT(Refusal(R"({"$defs": {"a": {"type": "object", "required": ["z"], "additionalProperties": false}},
                          "$ref": "#/$defs/a"})"),
              HasSubstr("at #/$defs/a/required"));
  ExpectEnforced(R"({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"},
                                                                     "v": {"type": "integer"}},
                                        "additionalProperties": false}},
                     "$ref": "#/$defs/node"})",
                 {R"({"next": {"v": 2}, "v": 1})"}, {R"({"next": {"w": 2}})"});
  // Subschemas xgrammar never reads (an unused $defs entry, the items of an
  // object) constrain nothing and are not checked.
  ExpectEnforced(R"({"type": "object", "items": {"required": ["a"]}, "$defs": {"unused": {"required": ["a"]}}})",
                 {"{}"}, {"[]"});
}

TEST_F(JsonSchemaRefusalTest, FormatsTheStandardDefinesButXgrammarDoesNotCheckAreRefused) {
  for (const char* format : {"iri", "iri-reference", "idn-email", "idn-hostname", "regex"}) {
    EXPECT_THAT(Refusal(absl::StrFormat(R"({"type": "object", "properties": {"f": {"type": "string",
                                            "format": "%s"}}})", format)),
                HasSubstr(absl::StrFormat("the keyword format \"%s\" is not supported at #/properties/f/format "
                                          "(it would not be enforced: xgrammar does not check that format)",
                                          format)));
  }
  // Formats the standard does not define are annotations (OpenAPI's int32,
  // ...), as JSON Schema reads them; a format constrains only strings.
  ExpectEnforced(R"({"type": "integer", "format": "int32", "maximum": 9})", {"7"}, {"10"});
  ExpectEnforced(R"({"type": "string", "format": "password", "maxLength": 3})", {"\"abc\""}, {"\"abcd\""});
  ExpectEnforced(R"({"type": "number", "format": "iri"})", {"1.5"}, {"\"x\""});
}

// xgrammar's own date takes any day up to 31 in any month, its time a leap
// second at any minute, its ipv4 leading zeros; the schema it is given
// holds them to the standard wherever they sit (a $ref's target, a union
// with null, a tool's parameters alike), and keeps the properties' order.
TEST_F(JsonSchemaRefusalTest, DatesTimesAndIpv4AreHeldToTheStandard) {
  const std::vector<std::string> valid = {"2024-02-29", "2000-02-29", "2023-02-28", "2024-04-30", "2024-12-31",
                                          "0000-02-29"};
  const std::vector<std::string> invalid = {"2024-02-30", "2023-02-29", "1900-02-29", "2024-04-31", "2024-06-31",
                                            "2024-13-01", "2024-00-10", "2024-01-00"};
  auto quoted = [](std::vector<std::string> dates, const std::string& suffix) {
    for (std::string& d : dates) d = "\"" + d + suffix + "\"";
    return dates;
  };
  ExpectEnforced(R"({"type": "string", "format": "date"})", quoted(valid, ""), quoted(invalid, ""));
  ExpectEnforced(R"({"type": ["string", "null"], "format": "date-time"})", quoted(valid, "T23:59:60.5+00:00"),
                 quoted(invalid, "T10:00:00Z"));
  ExpectEnforced(R"({"type": "string", "format": "date-time"})", {"\"2024-02-29T10:00:00.25Z\""},
                 {"\"2024-02-29T24:00:00Z\"", "\"2022-01-01T12:00:001Z\"", "\"2022-01-01T12:00:00.Z\""});
  const std::string schema = R"({"type": "object", "properties": {"z": {"$ref": "#/$defs/day"},
      "a": {"type": "integer"}}, "required": ["z", "a"], "additionalProperties": false,
      "$defs": {"day": {"type": "string", "format": "date"}}})";
  ExpectEnforced(schema, {R"({"z": "2024-02-29", "a": 1})"}, {R"({"z": "2023-02-29", "a": 1})", R"({"a": 1, "z": "2024-02-29"})"});
  auto enforced = EnforcedJsonSchema(schema, "json_schema");
  ASSERT_TRUE(enforced.ok()) << enforced.status();
  EXPECT_THAT(*enforced, HasSubstr(R"("properties":{"z":{"$ref":"#/$defs/day"},"a":)"));
  EXPECT_THAT(*enforced, ::testing::Not(HasSubstr("format")));
  // A leap second only at 23:59:60 UTC; octets without leading zeros.
  ExpectEnforced(R"({"type": "string", "format": "time"})", {"\"23:59:60Z\"", "\"12:30:59.5-05:00\"", "\"00:00:00Z\""},
                 {"\"12:30:60Z\"", "\"23:59:60+01:00\"", "\"24:00:00Z\"", "\"12:00:00\""});
  ExpectEnforced(R"({"type": "string", "format": "ipv4"})", {"\"10.0.0.7\"", "\"0.0.0.0\"", "\"255.255.255.255\""},
                 {"\"010.1.1.1\"", "\"10.0.0.07\"", "\"256.1.1.1\"", "\"1.2.3\""});
  // Nothing to tighten: the text as sent.
  EXPECT_EQ(*EnforcedJsonSchema(R"({"type": "string", "format": "uuid"})", "f"), R"({"type": "string", "format": "uuid"})");
}

TEST_F(JsonSchemaRefusalTest, OneOfMustBeProvablyExclusive) {
  // xgrammar enforces oneOf as anyOf.
  EXPECT_THAT(Refusal(R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})"),
              HasSubstr("the keyword oneOf (with branches not provably exclusive) is not supported at #/oneOf "
                        "(it would not be enforced: xgrammar enforces it as anyOf, and a value might match both "
                        "branch 0 and branch 1)"));
  EXPECT_THAT(Refusal(R"({"type": "object", "properties": {"p": {"oneOf": [
                          {"type": "object", "properties": {"a": {"type": "string"}}},
                          {"type": "object", "properties": {"b": {"type": "string"}}}]}}})"),
              HasSubstr("at #/properties/p/oneOf"));
  // Exclusive by type, by listed values, by a member one requires and the
  // other forbids, or by a discriminator (pydantic's tagged unions).
  ExpectEnforced(R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})",
                 {"\"s\"", "3", "null"}, {"1.5", "[]"});
  ExpectEnforced(R"({"oneOf": [{"enum": ["a", "b"]}, {"const": "c"}, {"type": "integer"}]})",
                 {"\"a\"", "\"c\"", "4"}, {"\"d\""});
  ExpectEnforced(R"({"oneOf": [
                       {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                        "additionalProperties": false},
                       {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"],
                        "additionalProperties": false}]})",
                 {R"({"a": 1})", R"({"b": 2})"}, {"{}", R"({"a": 1, "b": 2})"});
  ExpectEnforced(R"({"$defs": {
                       "Cat": {"type": "object", "properties": {"pet_type": {"const": "cat", "type": "string"},
                               "meows": {"type": "integer"}}, "required": ["pet_type", "meows"], "title": "Cat"},
                       "Dog": {"type": "object", "properties": {"pet_type": {"enum": ["dog"], "type": "string"},
                               "barks": {"type": "number"}}, "required": ["pet_type", "barks"], "title": "Dog"}},
                     "type": "object", "required": ["pet"], "properties": {"pet": {
                       "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                       "discriminator": {"propertyName": "pet_type"}}}})",
                 {R"({"pet": {"pet_type": "cat", "meows": 3}})"}, {R"({"pet": {"pet_type": "cow", "meows": 3}})"});
  // A discriminator no branch requires (an empty object matches both, which
  // oneOf refuses) becomes required in each: fewer instances, exclusive.
  ExpectEnforced(R"({"oneOf": [
                       {"type": "object", "properties": {"country": {"enum": ["CAN"]}, "state": {"type": "string"}}},
                       {"$ref": "#/$defs/mex"}],
                     "$defs": {"mex": {"type": "object", "properties": {"country": {"const": "MEX"},
                                                                        "zip": {"type": "string"}}}}})",
                 {R"({"country": "CAN", "state": "ON"})", R"({"country": "MEX", "zip": "1"})"},
                 {"{}", R"({"state": "ON"})", R"({"country": "USA"})"});
  // Branches that say only which members the object holds (required, not
  // required) become one anyOf branch per way to hold exactly one branch's
  // members: a member another branch needs is left out (false, which
  // closes the object: fewer instances), so "exactly one" is exact.
  const std::string shapes = R"({"type": "object", "properties": {
      "radius": {"type": "number"}, "length": {"type": "number"}, "width": {"type": "number"}},
      "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"], "description": "a rectangle"}]})";
  ExpectEnforced(shapes, {R"({"radius": 1})", R"({"length": 1, "width": 2})", R"({"radius": 1, "width": 2})"},
                 {"{}", R"({"length": 1})", R"({"radius": 1, "length": 1, "width": 2})",
                  R"({"length": 1, "width": 2, "radius": 1})"});
  EXPECT_THAT(*EnforcedJsonSchema(shapes, "f"), HasSubstr(R"("anyOf")"));
  // not beside oneOf's branches and on its own; a lone branch left needs
  // no anyOf and no closing where nothing is left out.
  ExpectEnforced(R"({"type": "object", "properties": {"q": {"type": "integer"}, "n": {"type": "integer"},
                       "z": {"type": "integer"}},
                     "oneOf": [{"type": "object", "required": ["q", "n"]},
                               {"type": "object", "required": ["z"], "not": {"required": ["n"]}}]})",
                 {R"({"q": 1, "n": 2})", R"({"q": 1, "n": 2, "z": 3})", R"({"z": 3})", R"({"q": 1, "z": 3})"},
                 {"{}", R"({"q": 1})", R"({"z": 3, "n": 2})"});
  ExpectEnforced(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                     "not": {"required": ["a", "b"]}})",
                 {"{}", R"({"a": 1})", R"({"b": 2})"}, {R"({"a": 1, "b": 2})"});
  // A oneOf no object meets is refused as such; one on a schema that is
  // not only an object's (a string meets every such branch) stays refused.
  EXPECT_THAT(Refusal(R"({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["a"]}]})"),
              HasSubstr("no value is valid under this schema"));
  EXPECT_THAT(Refusal(R"({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]})"),
              HasSubstr("not provably exclusive"));
  // Past 64 branches (12 branches of 6 members each: 6^11 ways) the oneOf
  // stays refused, found out within the rewrite's budget.
  std::string many = R"({"type": "object", "oneOf": [)";
  for (int b = 0; b < 12; ++b) {
    many += b ? ", {\"required\": [" : "{\"required\": [";
    for (int m = 0; m < 6; ++m) absl::StrAppend(&many, m ? ", " : "", "\"m", b, "_", m, "\"");
    many += "]}";
  }
  many += "]}";
  EXPECT_THAT(Refusal(many), HasSubstr("not provably exclusive"));
}

TEST_F(JsonSchemaRefusalTest, MultipleOfOnlyAsAWholeNumberUpTo1024AndPointersAreEscaped) {
  EXPECT_THAT(Refusal(R"({"type": "integer", "multipleOf": 2048})"),
              HasSubstr("the keyword multipleOf (other than a whole number up to 1024) is not supported at "
                        "#/multipleOf"));
  EXPECT_THAT(Refusal(R"({"type": "integer", "multipleOf": 2.5})"), HasSubstr("whole number up to 1024"));
  ExpectEnforced(R"({"type": ["integer", "null"], "multipleOf": 5})", {"10", "null"}, {"7"});
  // Member names in the pointer are escaped (RFC 6901): ~ as ~0, / as ~1.
  EXPECT_THAT(Refusal(R"({"type": "object", "properties": {"a/b~c": {"$dynamicRef": "#x"}}})"),
              HasSubstr("the keyword $dynamicRef is not supported at #/properties/a~1b~0c/$dynamicRef"));
}


// xgrammar 0.2.8 drops the start of an optional group that ends in a
// repetition ("^ab(-c+)?$" took "abc"; a BCP 47 tag pattern took
// "invalid"); patterns and regexes reach it with such groups as {0,1}.
TEST_F(JsonSchemaRefusalTest, OptionalGroupsEndingInARepetitionKeepTheirStart) {
  ExpectEnforced(R"({"type": "string", "pattern": "^ab(-c+)?$"})", {"\"ab\"", "\"ab-cc\""}, {"\"abc\"", "\"ab-\""});
  ExpectEnforced(R"({"type": "string", "pattern": "^[a-z]{2}(-[a-z]{5,8})?$"})", {"\"ab\"", "\"ab-cdefg\""},
                 {"\"abcd\"", "\"abcdefg\""});
  ExpectEnforced(R"({"type": "string",
                     "pattern": "^[a-zA-Z]{2,3}(-[a-zA-Z]{4})?(-([a-zA-Z]{2}|[0-9]{3}))?(-[a-zA-Z]{5,8})?$"})",
                 {"\"en\"", "\"zh-Hant-TW\""}, {"\"invalid\""});
  ExpectEnforced(R"({"type": "string", "pattern": "^x[)?]$"})", {"\"x)\"", "\"x?\""}, {"\"x\""});
  auto regex = grammars_->Regex("ab(-d-c+)?", "regex");
  ASSERT_TRUE(regex.ok()) << regex.status();
  const Tokenizer& tok = *loaded_->tokenizer();
  EXPECT_TRUE(Walk(**regex, tok, "ab-d-cc").complete);
  EXPECT_FALSE(Walk(**regex, tok, "abc").complete);
  EXPECT_FALSE(Walk(**regex, tok, "ab-c").complete);
  EXPECT_EQ(RegexForXgrammar("a(b)?c[(x)?]\\)?(d)??"), "a(b){0,1}c[(x)?]\\)?(d)??");
  // Counts past 128, which xgrammar fails to compile, in pieces of 128.
  EXPECT_EQ(RegexForXgrammar("^[a-z]{1,255}$"), "^[a-z]{1}[a-z]{0,128}[a-z]{0,126}$");
  EXPECT_EQ(RegexForXgrammar("x(ab){300,}\\d{2}"), "x(ab){128}(ab){128}(ab){44}(ab)*\\d{2}");
  ExpectEnforced(R"({"type": "string", "pattern": "^[a-z]{1,255}$"})",
                 {"\"a\"", "\"" + std::string(255, 'q') + "\""}, {"\"\"", "\"" + std::string(256, 'q') + "\""});
  ExpectEnforced(R"({"type": "object", "patternProperties": {"^k[0-9]{1,200}$": {"type": "integer"}}})",
                 {R"({"k12": 3})"}, {R"({"k12": "x"})", R"({"x": 1})"});
}
}  // namespace
}  // namespace flover
