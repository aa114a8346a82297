// A reply's reasoning, content and calls (chat/reply_reader.h): the same
// split whole and streamed, cut anywhere (inside a tag too).
#include "chat/reply_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flover {
namespace {

// The reply fed in two pieces cut at `cut`, its events gathered.
Reply Streamed(const ReplyReader::Options& o, const std::string& text, size_t cut) {
  ReplyReader r(o);
  std::vector<ReplyReader::Event> events = r.Push(text.substr(0, cut));
  for (auto& e : r.Push(text.substr(cut))) events.push_back(e);
  for (auto& e : r.Finish()) events.push_back(e);
  Reply out;
  for (const auto& e : events) {
    if (e.kind == ReplyReader::Event::kReasoning) out.reasoning += e.text;
    if (e.kind == ReplyReader::Event::kContent) out.content += e.text;
    if (e.kind == ReplyReader::Event::kCall) out.calls.push_back(e.call);
  }
  if (!out.calls.empty()) {
    while (!out.content.empty() && out.content.back() == ' ') out.content.pop_back();
  }
  return out;
}

// Byte by byte too: every piece one byte.
Reply ByteByByte(const ReplyReader::Options& o, const std::string& text) {
  ReplyReader r(o);
  Reply out;
  auto take = [&](std::vector<ReplyReader::Event> events) {
    for (const auto& e : events) {
      if (e.kind == ReplyReader::Event::kReasoning) out.reasoning += e.text;
      if (e.kind == ReplyReader::Event::kContent) out.content += e.text;
      if (e.kind == ReplyReader::Event::kCall) out.calls.push_back(e.call);
    }
  };
  for (char c : text) take(r.Push(std::string(1, c)));
  take(r.Finish());
  return out;
}

void ExpectSplit(const ReplyReader::Options& o, const std::string& text, const std::string& reasoning,
                 const std::string& content) {
  const Reply whole = ReadReply(o, text);
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Reply s = Streamed(o, text, cut);
    EXPECT_EQ(s.reasoning, reasoning) << text << " cut at " << cut;
    EXPECT_EQ(s.content, content) << text << " cut at " << cut;
  }
  const Reply b = ByteByByte(o, text);
  EXPECT_EQ(b.reasoning, reasoning) << text;
  EXPECT_EQ(b.content, content) << text;
}

TEST(ReplyReaderTest, ThinkTagsOpenedByTheReply) {
  ReplyReader::Options o;
  o.reasoning = ReasoningFormat::kThinkTags;
  ExpectSplit(o, "<think>\nLet me see.\n\nIt is 4.\n</think>\n\nThe answer is 4.", "Let me see.\n\nIt is 4.",
              "The answer is 4.");
  ExpectSplit(o, "  <think>x</think>y", "x", "y");
  // No reasoning: all content, leading whitespace and "<" included.
  ExpectSplit(o, "Hello <think> there", "", "Hello <think> there");
  ExpectSplit(o, " <thin", "", " <thin");
  ExpectSplit(o, "<b>bold</b>", "", "<b>bold</b>");
  // Cut off by its length: reasoning all the same, a partial tag too.
  ExpectSplit(o, "<think>still thinking </thi", "still thinking </thi", "");
  // A second </think> is the answer's.
  ExpectSplit(o, "<think>a</think>b</think>c", "a", "b</think>c");
  ExpectSplit(o, "<think></think>answer", "", "answer");
}

TEST(ReplyReaderTest, ThinkTagsOpenedByThePrompt) {
  ReplyReader::Options o;
  o.reasoning = ReasoningFormat::kThinkTags;
  o.starts_in_reasoning = true;
  ExpectSplit(o, "I should add.  \n</think>\n\n4", "I should add.", "4");
  ExpectSplit(o, "x < y and </ no </think>yes", "x < y and </ no", "yes");
  ExpectSplit(o, "no end", "no end", "");
  EXPECT_TRUE(StartsInReasoning(ReasoningFormat::kThinkTags, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(StartsInReasoning(ReasoningFormat::kThinkTags, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(StartsInReasoning(ReasoningFormat::kNone, "<think>\n"));
}

TEST(ReplyReaderTest, NoneLeavesTheTextAsItIs) {
  ReplyReader::Options o;
  ExpectSplit(o, "<think>x</think> y ", "", "<think>x</think> y ");
}

TEST(ReplyReaderTest, CallsAfterTheReasoning) {
  ReplyReader::Options o;
  o.reasoning = ReasoningFormat::kThinkTags;
  o.tools = ToolCallFormat::kHermes;
  o.call_id_prefix = "c_";
  const std::string text =
      "<think>I need the weather.</think>\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Oslo\"}}\n"
      "</tool_call>";
  const Reply whole = ReadReply(o, text);
  EXPECT_EQ(whole.reasoning, "I need the weather.");
  EXPECT_EQ(whole.content, "");
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].name, "get");
  EXPECT_EQ(whole.calls[0].id, "c_0");
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Reply s = Streamed(o, text, cut);
    EXPECT_EQ(s.reasoning, whole.reasoning) << cut;
    ASSERT_EQ(s.calls.size(), 1u) << cut;
    EXPECT_EQ(s.calls[0].arguments, whole.calls[0].arguments) << cut;
  }
  // A call inside the reasoning is reasoning, not a call.
  const Reply inside = ReadReply(o, "<think><tool_call>{\"name\": \"get\", \"arguments\": {}}</tool_call></think>ok");
  EXPECT_TRUE(inside.calls.empty());
  EXPECT_EQ(inside.content, "ok");
}

// Gemma 4 thinks in a channel: <|channel>thought\n...\n<channel|>, which
// its template writes back into earlier turns the same way; thinking off
// (the large template) or after a tool's result, the prompt may open or
// close it.
TEST(ReplyReaderTest, Gemma4ThoughtChannel) {
  ReplyReader::Options o;
  o.reasoning = ReasoningFormat::kChannel;
  ExpectSplit(o, "<|channel>thought\nThe user wants 2+2.\nIt is 4.\n<channel|>The answer is 4.",
              "The user wants 2+2.\nIt is 4.", "The answer is 4.");
  ExpectSplit(o, "<|channel>thought\n<channel|>Hi there.", "", "Hi there.");
  ExpectSplit(o, "Hi <|channel> there", "", "Hi <|channel> there");
  ExpectSplit(o, "<|channel>thought\nstill going <chan", "still going <chan", "");
  ExpectSplit(o, "<think>x</think>y", "", "<think>x</think>y");
  o.starts_in_reasoning = true;
  ExpectSplit(o, "The tool said 21C.\n<channel|>It is 21C in Paris.", "The tool said 21C.", "It is 21C in Paris.");
  EXPECT_TRUE(StartsInReasoning(ReasoningFormat::kChannel, "<tool_response|><|channel>thought\n"));
  EXPECT_FALSE(StartsInReasoning(ReasoningFormat::kChannel, "<|turn>model\n<|channel>thought\n<channel|>"));
  EXPECT_FALSE(StartsInReasoning(ReasoningFormat::kChannel, "<|turn>model\n"));
  EXPECT_EQ(ReasoningCloseTag(ReasoningFormat::kChannel), "<channel|>");
  EXPECT_EQ(ReasoningCloseTag(ReasoningFormat::kThinkTags), "</think>");
  EXPECT_EQ(ReasoningCloseTag(ReasoningFormat::kHarmony), "");
}

TEST(ReplyReaderTest, Gemma4CallsAfterTheThought) {
  ReplyReader::Options o;
  o.reasoning = ReasoningFormat::kChannel;
  o.tools = ToolCallFormat::kGemma4;
  o.call_id_prefix = "c_";
  o.stream_arguments = true;
  const std::string text =
      "<|channel>thought\nI need the weather.\n<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,"
      "unit:<|\"|>celsius<|\"|>}<tool_call|><|tool_call>call:get_time{}<tool_call|>";
  const Reply whole = ReadReply(o, text);
  EXPECT_EQ(whole.reasoning, "I need the weather.");
  EXPECT_EQ(whole.content, "");
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].name, "get_weather");
  EXPECT_EQ(whole.calls[0].arguments, R"({"city":"Paris","unit":"celsius"})");
  EXPECT_EQ(whole.calls[1].name, "get_time");
  EXPECT_EQ(whole.calls[1].arguments, "{}");
  EXPECT_EQ(whole.calls[1].id, "c_1");
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Reply s = Streamed(o, text, cut);
    EXPECT_EQ(s.reasoning, whole.reasoning) << cut;
    ASSERT_EQ(s.calls.size(), 2u) << cut;
    EXPECT_EQ(s.calls[0].arguments, whole.calls[0].arguments) << cut;
  }
  // A reply that calls at once (no thought): no content, cut anywhere.
  const std::string at_once = text.substr(text.find("<|tool_call>"));
  for (size_t cut = 0; cut <= at_once.size(); ++cut) {
    const Reply s = Streamed(o, at_once, cut);
    EXPECT_EQ(s.content, "") << cut;
    EXPECT_EQ(s.calls.size(), 2u) << cut;
  }
  EXPECT_EQ(ByteByByte(o, at_once).content, "");
  // The stream names a call before its arguments end, and gives them once.
  ReplyReader r(o);
  std::vector<ReplyReader::Event> events = r.Push(text.substr(0, text.find("Paris")));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, ReplyReader::Event::kCallBegin);
  EXPECT_EQ(events.back().call.name, "get_weather");
  events = r.Push(text.substr(text.find("Paris")));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ReplyReader::Event::kArguments);
  EXPECT_EQ(events[0].text, whole.calls[0].arguments);
  EXPECT_EQ(events[1].kind, ReplyReader::Event::kCall);
}

TEST(ReplyReaderTest, FormatsByName) {
  EXPECT_EQ(ReasoningFormatNamed("gemma4").value(), ReasoningFormat::kChannel);
  EXPECT_EQ(ReasoningFormatOf("{{- '<|channel>thought\\n' + thinking_text -}}"), ReasoningFormat::kChannel);
  EXPECT_EQ(ReasoningFormatNamed("think").value(), ReasoningFormat::kThinkTags);
  EXPECT_EQ(ReasoningFormatNamed("none").value(), ReasoningFormat::kNone);
  EXPECT_FALSE(ReasoningFormatNamed("deepseek").ok());
  EXPECT_EQ(ReasoningFormatOf("{{ '<think>\\n' }}"), ReasoningFormat::kThinkTags);
  EXPECT_EQ(ReasoningFormatOf("{{ message.content }}"), ReasoningFormat::kNone);
}

}  // namespace
}  // namespace flover
