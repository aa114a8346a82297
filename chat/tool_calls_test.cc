#include "chat/tool_calls.h"

#include <string>
#include <vector>

#include "chat/gemma4_calls.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/files.h"

namespace flover {
namespace {

using Json = nlohmann::json;

// The events of `text` pushed in pieces of `piece` bytes, merged: content
// pieces joined, calls as "name(args)".
std::vector<std::string> Streamed(ToolCallFormat f, const std::string& text, size_t piece) {
  ToolCallStream stream(f, "call_");
  std::vector<ToolCallStream::Event> events;
  for (size_t at = 0; at < text.size(); at += piece) {
    for (auto& e : stream.Push(text.substr(at, piece))) events.push_back(std::move(e));
  }
  for (auto& e : stream.Finish()) events.push_back(std::move(e));
  std::vector<std::string> out;
  bool last_content = false;
  for (const auto& e : events) {
    if (e.index < 0) {
      EXPECT_FALSE(e.content.empty());
      if (last_content) {
        out.back() += e.content;
      } else {
        out.push_back(e.content);
      }
      last_content = true;
    } else {
      out.push_back(e.call.id + ":" + e.call.name + e.call.arguments);
      last_content = false;
    }
  }
  return out;
}

// Every way of cutting `text` into pieces reads as the whole does.
void ExpectEveryPieceSize(ToolCallFormat f, const std::string& text, const std::vector<std::string>& want) {
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, text.size()}) {
    EXPECT_EQ(Streamed(f, text, piece), want) << "pieces of " << piece;
  }
}

TEST(ToolCallsTest, HermesCallsAfterText) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  ExpectEveryPieceSize(ToolCallFormat::kHermes, text,
                       {"Let me look.", "call_0:get_weather{\"city\":\"Paris\"}", "call_1:get_time{}"});
  const ParsedReply reply = ParseToolCalls(ToolCallFormat::kHermes, text, "id-");
  EXPECT_EQ(reply.content, "Let me look.");
  ASSERT_EQ(reply.calls.size(), 2u);
  EXPECT_EQ(reply.calls[0].id, "id-0");
  EXPECT_EQ(reply.calls[1].id, "id-1");
  EXPECT_EQ(reply.calls[1].name, "get_time");
}

TEST(ToolCallsTest, TextAloneIsContentWithItsWhitespace) {
  ExpectEveryPieceSize(ToolCallFormat::kHermes, "  two  words <tool ", {"  two  words <tool "});
  ExpectEveryPieceSize(ToolCallFormat::kHermes, "a <tool_cal", {"a <tool_cal"});
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kHermes, "plain", "c").content, "plain");
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kHermes, "plain", "c").calls.empty());
}

TEST(ToolCallsTest, WhatDoesNotParseComesBackAsContent) {
  // Not JSON; no name; arguments not an object; cut off; no closing tag
  // but other text.
  for (const std::string text :
       {"<tool_call>\n{not json}\n</tool_call>", "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"argu", "<tool_call>{\"name\": \"f\", \"arguments\": {}} and more"}) {
    const ParsedReply reply = ParseToolCalls(ToolCallFormat::kHermes, text, "c");
    EXPECT_TRUE(reply.calls.empty()) << text;
    EXPECT_EQ(reply.content, text) << text;
    ExpectEveryPieceSize(ToolCallFormat::kHermes, text, {text});
  }
}

TEST(ToolCallsTest, HermesCallCutBeforeItsClosingTagIsStillACall) {
  const ParsedReply reply =
      ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool", "c");
  ASSERT_EQ(reply.calls.size(), 1u);
  EXPECT_EQ(reply.calls[0].arguments, "{\"a\":[1,2]}");
  EXPECT_EQ(reply.content, "");
}

TEST(ToolCallsTest, ArgumentsAsAStringOfJsonOrAsParameters) {
  const ParsedReply a = ParseToolCalls(
      ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", "c");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"x\":1}");
  const ParsedReply b =
      ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"parameters\": {}}</tool_call>", "c");
  ASSERT_EQ(b.calls.size(), 1u);
}

TEST(ToolCallsTest, RawControlCharactersInStringsAreEscaped) {
  // The grammar's JSON lets a model write a raw newline inside a string.
  const ParsedReply reply = ParseToolCalls(
      ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"text\": \"a\nb\"}}</tool_call>", "c");
  ASSERT_EQ(reply.calls.size(), 1u);
  EXPECT_EQ(Json::parse(reply.calls[0].arguments)["text"], "a\nb");
  EXPECT_EQ(EscapeControlsInStrings("{\"k\": \"\t\"}\n"), "{\"k\": \"\\u0009\"}\n");
}

// Arguments streamed (as the server does where the grammar holds the
// calls): each call begins with its id and name as soon as its arguments
// start, its fragments arrive with the text, and they join to the model's
// own arguments text before the whole call comes out.
struct StreamedCall {
  std::string id, name, fragments;
  int fragments_before_end = 0;  // fragments out before the call's last byte was pushed
  bool whole = false;
};
std::vector<StreamedCall> StreamArguments(ToolCallFormat f, const std::string& text, std::string* content) {
  ToolCallStream stream(f, "call_", /*stream_arguments=*/true);
  std::vector<StreamedCall> calls;
  auto read = [&](std::vector<ToolCallStream::Event> events, bool last) {
    for (auto& e : events) {
      switch (e.kind) {
        case ToolCallStream::Event::kContent: *content += e.content; break;
        case ToolCallStream::Event::kCallBegin:
          EXPECT_EQ(e.index, static_cast<int>(calls.size()));
          calls.push_back({e.call.id, e.call.name, "", 0, false});
          break;
        case ToolCallStream::Event::kArguments:
          calls.back().fragments += e.content;
          if (!last) ++calls.back().fragments_before_end;
          break;
        case ToolCallStream::Event::kCall:
          EXPECT_EQ(e.call.id, calls.back().id);
          EXPECT_EQ(Json::parse(calls.back().fragments), Json::parse(e.call.arguments));
          calls.back().whole = true;
          break;
      }
    }
  };
  for (size_t at = 0; at < text.size(); ++at) read(stream.Push(text.substr(at, 1)), at + 1 == text.size());
  read(stream.Finish(), true);
  return calls;
}

TEST(ToolCallsTest, StreamedArgumentsArriveAsTheyAreWritten) {
  std::string content;
  const std::vector<StreamedCall> calls = StreamArguments(
      ToolCallFormat::kHermes,
      "Looking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": [1, 2]}}\n</tool_call>",
      &content);
  EXPECT_EQ(content, "Looking.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].id, "call_0");
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].fragments, "{\"city\": \"Paris\", \"days\": [1, 2]}");  // as written
  EXPECT_GT(calls[0].fragments_before_end, 20);  // a fragment per byte, not one at the end
  EXPECT_TRUE(calls[0].whole);
}

TEST(ToolCallsTest, StreamedArgumentsBeforeTheNameWaitForIt) {
  std::string content;
  const std::vector<StreamedCall> calls = StreamArguments(
      ToolCallFormat::kHermes, "<tool_call>{\"parameters\": {\"q\": \"a\\nb\"}, \"name\": \"search\"}</tool_call>",
      &content);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "search");
  EXPECT_EQ(calls[0].fragments, "{\"q\": \"a\\nb\"}");
  EXPECT_TRUE(calls[0].whole);
  EXPECT_EQ(content, "");
}

TEST(ToolCallsTest, StreamedArgumentsEscapeRawControlCharacters) {
  std::string content;
  const std::vector<StreamedCall> calls = StreamArguments(
      ToolCallFormat::kHermes, "<tool_call>{\"name\": \"note\", \"arguments\": {\"text\": \"a\nb\"}}</tool_call>",
      &content);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].fragments, "{\"text\": \"a\\u000ab\"}");
  EXPECT_EQ(Json::parse(calls[0].fragments)["text"], "a\nb");
}

TEST(ToolCallsTest, StreamedMistralListsComeOutCallByCall) {
  std::string content;
  const std::vector<StreamedCall> calls = StreamArguments(
      ToolCallFormat::kMistral,
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
      &content);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "a");
  EXPECT_EQ(calls[0].fragments, "{\"x\":1}");  // whole, just before the call
  EXPECT_EQ(calls[1].name, "b");
  EXPECT_TRUE(calls[0].whole && calls[1].whole);
}

TEST(ToolCallsTest, AKeyTwiceIsNoCall) {
  // Which name (or arguments) would be meant is not clear, and a streamed
  // one might not be what the JSON reads as: content, in both ways of reading.
  for (const std::string text :
       {"<tool_call>{\"name\": \"a\", \"name\": \"b\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"parameters\": {}}</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": {}, \"arguments\": {\"y\": 2}}</tool_call>"}) {
    const ParsedReply reply = ParseToolCalls(ToolCallFormat::kHermes, text, "c");
    EXPECT_TRUE(reply.calls.empty()) << text;
    EXPECT_EQ(reply.content, text);
    std::string content;
    for (const StreamedCall& c : StreamArguments(ToolCallFormat::kHermes, text, &content)) {
      EXPECT_FALSE(c.whole) << text;
    }
    EXPECT_EQ(content, text);
  }
}

TEST(ToolCallsTest, Llama3JsonCalls) {
  const std::string text = "{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {}}";
  ExpectEveryPieceSize(ToolCallFormat::kLlama3Json, text, {"call_0:f{\"x\":1}", "call_1:g{}"});
  ExpectEveryPieceSize(ToolCallFormat::kLlama3Json, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
                       {"call_0:f{}"});
  // A JSON object that is no call stays text.
  const std::string person = "He is {\"name\": \"Bob\"}.";
  ExpectEveryPieceSize(ToolCallFormat::kLlama3Json, person, {person});
}

TEST(ToolCallsTest, MistralCalls) {
  const std::string text =
      "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}, {\"name\": \"g\", \"arguments\": {}}]";
  ExpectEveryPieceSize(ToolCallFormat::kMistral, text, {"call_0:f{\"a\":\"b\"}", "call_1:g{}"});
}

// Gemma 4's calls as Google's template writes them (calls.json: rendered by
// transformers from each case's arguments): each reads back to its
// arguments, whole and in pieces of any size, after text or not.
TEST(ToolCallsTest, Gemma4CallsReadBackToTheirArguments) {
  const std::string file = testing::ReadFileOrEmpty("tests/golden/gemma4_chat/calls.json");
  ASSERT_FALSE(file.empty());
  const Json cases = Json::parse(file)["cases"];
  ASSERT_GE(cases.size(), 8u);
  for (const Json& c : cases) {
    const std::string rendered = c["rendered"];
    for (const std::string& before : {std::string(), std::string("Let me check. ")}) {
      const std::string text = before + rendered;
      const ParsedReply whole = ParseToolCalls(ToolCallFormat::kGemma4, text, "call_");
      ASSERT_EQ(whole.calls.size(), 1u) << text;
      EXPECT_EQ(whole.calls[0].name, c["function"].get<std::string>());
      EXPECT_EQ(Json::parse(whole.calls[0].arguments), c["arguments"]) << c["name"];
      EXPECT_EQ(whole.content, before.empty() ? "" : "Let me check.");
      std::vector<std::string> want;
      if (!before.empty()) want.push_back("Let me check.");
      want.push_back("call_0:" + whole.calls[0].name + whole.calls[0].arguments);
      ExpectEveryPieceSize(ToolCallFormat::kGemma4, text, want);
    }
  }
}

TEST(ToolCallsTest, Gemma4WhatIsNoCallIsContent) {
  // Cut off, not its notation, or a key twice: the text as it came.
  for (const std::string text : {"<|tool_call>call:f{a:<|\"|>x", "<|tool_call>call:f{a:x}<tool_call|>",
                                 "<|tool_call>call:f{a:1,a:2}<tool_call|>", "<|tool_call>f{}<tool_call|>",
                                 "<|tool_call>call:f{a:1} trailing<tool_call|>"}) {
    const ParsedReply r = ParseToolCalls(ToolCallFormat::kGemma4, text, "call_");
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
  // Whitespace between parts, keys quoted: read all the same.
  const auto call = ReadGemma4Call(" call:f{ <|\"|>a b<|\"|> : [ 1 , true ] , c :{}}");
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->arguments, R"({"a b":[1,true],"c":{}})");
  // The notation's strings are raw bytes: what is no UTF-8 becomes U+FFFD.
  const auto bytes = ReadGemma4Call("call:f{a:<|\"|>o\x98k<|\"|>}");
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->arguments, "{\"a\":\"o\xef\xbf\xbdk\"}");
}

TEST(ToolCallsTest, Gemma4GrammarsRefuseWhatTheNotationCannotHold) {
  for (const auto& [schema, word] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a$"}}})", "'pattern'"},
           {R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}})", "'minimum'"},
           {R"({"type": "object", "properties": {"a:b": {"type": "integer"}}})", "'a:b' cannot be written bare"},
           {R"({"type": "object", "properties": {"r": {"$ref": "https://x/y"}}})", "#/"},
           {R"({"type": "object", "additionalProperties": {"type": "integer"}})", "additionalProperties"},
           {R"({"type": "array"})", "an object"}}) {
    auto g = Gemma4ArgumentsGrammar(schema, "tools[0].function.parameters");
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(word), std::string::npos) << g.status();
    EXPECT_NE(g.status().message().find("tools[0].function.parameters"), std::string::npos) << g.status();
  }
  // Descriptions, titles and defaults describe: they are left alone.
  EXPECT_TRUE(Gemma4ArgumentsGrammar(
                  R"({"type": "object", "title": "T", "properties": {"a": {"type": "string", "description": "d",
                      "default": "x"}}, "$defs": {}})",
                  "p")
                  .ok());
}

TEST(ToolCallsTest, FormatsByNameAndByTemplate) {
  EXPECT_EQ(*ToolCallFormatNamed("gemma4"), ToolCallFormat::kGemma4);
  EXPECT_EQ(ToolCallFormatOf("{{- '<|tool_call>call:' + function['name'] + '{' -}}"), ToolCallFormat::kGemma4);
  EXPECT_EQ(*ToolCallFormatNamed("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_FALSE(ToolCallFormatNamed("qwen").ok());
  EXPECT_EQ(ToolCallFormatOf("{{ '<tool_call>' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(ToolCallFormatOf("[TOOL_CALLS] {{ x }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(ToolCallFormatOf("<|start_header_id|>"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ToolCallFormatOf("{{ messages }}"), ToolCallFormat::kHermes);
}

TEST(ToolCallsTest, GrammarsForEachChoice) {
  const std::vector<ToolFunction> tools = {{"get_weather", "", R"({"type": "object", "properties": {"city": {"type": "string"}}})"},
                                           {"get_time", "the time", ""}};
  auto named = ToolCallGrammar(ToolCallFormat::kHermes, tools, ToolChoice::kNamed, "get_time", true);
  ASSERT_TRUE(named.ok()) << named.status();
  const Json n = Json::parse(named->structural_tag);
  EXPECT_EQ(n["type"], "structural_tag");
  EXPECT_EQ(n["format"]["type"], "tag");
  EXPECT_EQ(n["format"]["begin"], "<tool_call>\n{\"name\": \"get_time\", \"arguments\": ");
  EXPECT_EQ(n["format"]["end"], "}\n</tool_call>");

  auto required = ToolCallGrammar(ToolCallFormat::kLlama3Json, tools, ToolChoice::kRequired, "", false);
  ASSERT_TRUE(required.ok());
  const Json r = Json::parse(required->structural_tag);
  EXPECT_EQ(r["format"]["type"], "or");  // one call of either
  EXPECT_EQ(r["format"]["elements"].size(), 2u);
  EXPECT_EQ(r["format"]["elements"][0]["begin"], "{\"name\": \"get_weather\", \"parameters\": ");

  auto automatic = ToolCallGrammar(ToolCallFormat::kHermes, tools, ToolChoice::kAuto, "", true);
  ASSERT_TRUE(automatic.ok());
  const Json a = Json::parse(automatic->structural_tag);
  EXPECT_EQ(a["format"]["type"], "sequence");  // text and a call, then more calls
  EXPECT_EQ(a["format"]["elements"][0]["triggers"], Json::array({"<tool_call>"}));
  EXPECT_EQ(ToolCallGrammar(ToolCallFormat::kHermes, tools, ToolChoice::kNamed, "nope", true).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Mistral's marker as a special token: the grammar holds the list after
  // it, and the token comes first (after text, with auto).
  auto mistral = ToolCallGrammar(ToolCallFormat::kMistral, tools, ToolChoice::kNamed, "get_time", true, 7);
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->after_token, 7);
  EXPECT_FALSE(mistral->text_before);
  const Json m = Json::parse(mistral->structural_tag);
  EXPECT_EQ(m["format"]["begin"], " [");
  EXPECT_EQ(m["format"]["content"]["begin"], "{\"name\": \"get_time\", \"arguments\": ");
  EXPECT_EQ(m["format"]["end"], "]");
  auto mistral_auto = ToolCallGrammar(ToolCallFormat::kMistral, tools, ToolChoice::kAuto, "", true, 7);
  ASSERT_TRUE(mistral_auto.ok());
  EXPECT_TRUE(mistral_auto->text_before);
  // Without such a token, the marker is text and triggers the list.
  auto mistral_text = ToolCallGrammar(ToolCallFormat::kMistral, tools, ToolChoice::kAuto, "", true);
  ASSERT_TRUE(mistral_text.ok());
  EXPECT_EQ(mistral_text->after_token, -1);
  const Json t = Json::parse(mistral_text->structural_tag);
  EXPECT_EQ(t["format"]["triggers"], Json::array({"[TOOL_CALLS]"}));
  EXPECT_EQ(t["format"]["tags"][0]["begin"], "[TOOL_CALLS] [");
}

TEST(ToolCallsTest, DescriptionNamesEveryToolAndTheSyntax) {
  const std::string d = DescribeTools({{"get_weather", "Weather now", R"({"type": "object"})"}});
  EXPECT_NE(d.find("\"name\":\"get_weather\""), std::string::npos) << d;
  EXPECT_NE(d.find("Weather now"), std::string::npos);
  EXPECT_NE(d.find("<tool_call>"), std::string::npos);
  const std::string call = HermesCallText({"id", "f", "{\"a\":1}"});
  const ParsedReply back = ParseToolCalls(ToolCallFormat::kHermes, call, "c");
  ASSERT_EQ(back.calls.size(), 1u);
  EXPECT_EQ(back.calls[0].arguments, "{\"a\":1}");
}

}  // namespace
}  // namespace flover
