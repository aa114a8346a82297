// gpt-oss's harmony replies (chat/harmony_reader.h) against openai-harmony
// 0.0.8's own parses of the same text (tests/golden/harmony/parses.json,
// make_parses.py): each message it finds, by channel and recipient, comes
// back as reasoning, content or a call; whole, cut anywhere and byte by
// byte, with and without the stop token's text.
#include "chat/harmony_reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "chat/reply_reader.h"
#include "nlohmann/json.hpp"

namespace flover {
namespace {

using Json = nlohmann::json;

struct Expected {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

Reply Read(const std::vector<std::string>& pieces, bool tools, const std::string& open_header = "") {
  ReplyReader::Options o;
  o.open_header = open_header;
  o.reasoning = ReasoningFormat::kHarmony;
  if (tools) o.tools = ToolCallFormat::kHermes;  // harmony's own calls whatever the tool format
  o.call_id_prefix = "call_";
  o.stream_arguments = true;
  ReplyReader r(o);
  Reply out;
  std::vector<std::string> fragments;
  auto take = [&](std::vector<ReplyReader::Event> events) {
    for (auto& e : events) {
      if (e.kind == ReplyReader::Event::kReasoning) out.reasoning += e.text;
      if (e.kind == ReplyReader::Event::kContent) out.content += e.text;
      if (e.kind == ReplyReader::Event::kCallBegin) fragments.emplace_back();
      if (e.kind == ReplyReader::Event::kArguments) fragments.back() += e.text;
      if (e.kind == ReplyReader::Event::kCall) {
        // The streamed fragments are the call's arguments, as written.
        EXPECT_EQ(Json::parse(fragments.back()), Json::parse(e.call.arguments));
        out.calls.push_back(e.call);
      }
    }
  };
  for (const std::string& p : pieces) take(r.Push(p));
  take(r.Finish());
  return out;
}

void ExpectReply(const Reply& got, const Expected& want, const std::string& what) {
  EXPECT_EQ(got.reasoning, want.reasoning) << what;
  EXPECT_EQ(got.content, want.content) << what;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << what;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << what;
    EXPECT_EQ(got.calls[i].id, "call_" + std::to_string(i)) << what;
    EXPECT_EQ(Json::parse(got.calls[i].arguments), Json::parse(want.calls[i].arguments)) << what;
  }
}

TEST(HarmonyReaderTest, SplitsAsOpenAiHarmonyParses) {
  std::ifstream in("tests/golden/harmony/parses.json");
  ASSERT_TRUE(in.good());
  std::stringstream buf;
  buf << in.rdbuf();
  const Json fixture = Json::parse(buf.str());
  int checked = 0;
  for (const Json& sample : fixture["samples"]) {
    const std::string name = sample["name"];
    // A reply follows "<|start|>assistant"; a strict parse that failed has
    // no messages to compare.
    if (sample["role"].is_null() && !absl::StartsWith(std::string(sample["text"]), "<|start|>assistant")) continue;
    if (!sample["error"].is_null()) continue;
    Expected want;
    for (const Json& m : sample["messages"]) {
      const std::string content = m["content"], channel = m["channel"].is_null() ? "" : std::string(m["channel"]);
      const std::string recipient = m["recipient"].is_null() ? "" : std::string(m["recipient"]);
      if (absl::StartsWith(recipient, "functions.")) {
        want.calls.push_back({"", recipient.substr(10), content});
      } else if (channel == "analysis" && recipient.empty()) {
        want.reasoning += content;
      } else {
        want.content += content;
      }
    }
    std::string text = sample["text"];
    // openai-harmony's non-strict guess at a header without <|message|>
    // ("<|channel|>final Hello there") is not read as a message here.
    if (absl::StrContains(text, "<|channel|>final Hello")) continue;
    std::vector<std::string> texts = {text};
    for (absl::string_view stop : {"<|return|>", "<|call|>", "<|end|>"}) {
      if (absl::EndsWith(text, stop)) texts.push_back(text.substr(0, text.size() - stop.size()));
    }
    for (const std::string& t : texts) {
      ExpectReply(Read({t}, true), want, name + " whole");
      for (size_t cut = 0; cut <= t.size(); ++cut) {
        ExpectReply(Read({t.substr(0, cut), t.substr(cut)}, true), want, name + " cut at " + std::to_string(cut));
      }
      std::vector<std::string> bytes;
      for (char c : t) bytes.emplace_back(1, c);
      ExpectReply(Read(bytes, true), want, name + " byte by byte");
    }
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

// Without tools in the request, a message to a function is content; a body
// that is no JSON object is content too; a reply without any header is the
// answer as it is.
TEST(HarmonyReaderTest, CallsOnlyWithToolsAndValidArguments) {
  const std::string call =
      "<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>";
  const Reply no_tools = Read({call}, false);
  EXPECT_TRUE(no_tools.calls.empty());
  EXPECT_EQ(no_tools.content, "{\"city\": \"Oslo\"}");
  const Reply bad = Read({"<|channel|>commentary to=functions.get<|message|>not json<|call|>"}, true);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "not json");
  const Reply plain = Read({"Just text <b>", " with a tag"}, true);
  EXPECT_EQ(plain.content, "Just text <b> with a tag");
  EXPECT_EQ(plain.reasoning, "");
  // Two calls in one reply get ids 0 and 1.
  const Reply two = Read({call.substr(0, call.size() - 8), "<|end|><|start|>assistant", call}, true);
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].id, "call_1");
}

// A call the server opened in the prompt (a named tool_choice): the reply
// is its body, whole or cut anywhere, with or without <|call|>.
TEST(HarmonyReaderTest, ACallThePromptOpened) {
  const std::string prompt = "<|start|>user<|message|>Weather?<|end|><|start|>assistant" + HarmonyCallHeader("get");
  const std::string header = HarmonyOpenHeader(prompt);
  EXPECT_EQ(header, "assistant<|channel|>commentary to=functions.get <|constrain|>json");
  EXPECT_EQ(HarmonyOpenHeader("<|start|>user<|message|>Hi<|end|><|start|>assistant"), "");
  EXPECT_EQ(HarmonyOpenHeader("<|channel|>final<|message|>a <|message|>"), "");
  for (const std::string body : {"{\"city\": \"Oslo\"}<|call|>", "{\"city\": \"Oslo\"}"}) {
    for (size_t cut = 0; cut <= body.size(); ++cut) {
      const Reply r = Read({body.substr(0, cut), body.substr(cut)}, true, header);
      ASSERT_EQ(r.calls.size(), 1u) << cut;
      EXPECT_EQ(r.calls[0].name, "get");
      EXPECT_EQ(Json::parse(r.calls[0].arguments), Json::parse("{\"city\": \"Oslo\"}"));
      EXPECT_EQ(r.content, "");
    }
  }
}

TEST(HarmonyReaderTest, FormatByNameAndTemplate) {
  EXPECT_EQ(ReasoningFormatNamed("harmony").value(), ReasoningFormat::kHarmony);
  EXPECT_STREQ(ReasoningFormatName(ReasoningFormat::kHarmony), "harmony");
  EXPECT_EQ(ReasoningFormatOf("{{- '<|start|>assistant<|channel|>final<|message|>' }}"), ReasoningFormat::kHarmony);
  EXPECT_FALSE(StartsInReasoning(ReasoningFormat::kHarmony, "<|start|>assistant"));
}

}  // namespace
}  // namespace flover
