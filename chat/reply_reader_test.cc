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

TEST(ReplyReaderTest, FormatsByName) {
  EXPECT_EQ(ReasoningFormatNamed("think").value(), ReasoningFormat::kThinkTags);
  EXPECT_EQ(ReasoningFormatNamed("none").value(), ReasoningFormat::kNone);
  EXPECT_FALSE(ReasoningFormatNamed("deepseek").ok());
  EXPECT_EQ(ReasoningFormatOf("{{ '<think>\\n' }}"), ReasoningFormat::kThinkTags);
  EXPECT_EQ(ReasoningFormatOf("{{ message.content }}"), ReasoningFormat::kNone);
}

}  // namespace
}  // namespace flover
