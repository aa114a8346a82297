// Chat formatting with real tokenizers: SmolLM2's own template and
// vocabulary give llama.cpp's ids for a chat (make_gguf_golden.py), BOS
// appears once when a template writes it, and each template's end of turn
// is found from the template itself.
#include "chat/chat_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "chat/tool_calls.h"
#include "nlohmann/json.hpp"

#include "model/loader/gguf_tokenizer.h"
#include "testing/files.h"
#include "testing/gguf_text.h"
#include "testing/golden.h"
#include "util/json.h"

namespace flover {
namespace {

using ::testing::HasSubstr;

std::string Template(const std::string& name) {
  auto all = jinja::ParseJsonValue(testing::ReadFileOrEmpty("tests/golden/chat_templates/templates.json"),
                                   "templates.json");
  EXPECT_TRUE(all.ok());
  return all.ok() && all->Find(name) != nullptr ? all->Find(name)->string() : "";
}

std::unique_ptr<ChatFormat> Format(const std::string& name, const GgufText& vocab) {
  auto f = ChatFormat::Create(Template(name), name, vocab.tokenizer->Decode({vocab.bos_id}),
                              vocab.tokenizer->Decode({vocab.eos_ids[0]}), vocab.tokenizer);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::move(*f) : nullptr;
}

TEST(ChatFormatTest, SmolLM2ChatTokenizesAsLlamaCppDoes) {
  const GgufText v = testing::LoadGgufText("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_NE(v.tokenizer, nullptr) << "run tools/setup.sh";
  auto f = ChatFormat::Create(v.chat_template, "smollm2", "", "", v.tokenizer);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->end_of_turn_ids(), std::vector<int32_t>{2});  // <|im_end|>
  const std::vector<ChatMessage> chat = {{"user", "What is 12*34?"}};
  auto text = (*f)->Render(chat);
  ASSERT_TRUE(text.ok()) << text.status();
  // The template's default system prompt, then the turn, then the assistant's.
  auto cases = jinja::ParseJsonValue(testing::ReadFileOrEmpty("tests/golden/gguf/smollm2_cases.json"), "c");
  ASSERT_TRUE(cases.ok());
  const jinja::Value& last = cases->list().back();
  EXPECT_EQ(*text, last.Find("text")->string());
  auto ids = (*f)->Tokenize(chat);
  ASSERT_TRUE(ids.ok());
  std::vector<int32_t> want;
  for (const jinja::Value& id : last.Find("ids")->list()) want.push_back(static_cast<int32_t>(id.integer()));
  EXPECT_EQ(*ids, want);
}

TEST(ChatFormatTest, BosOnceAndEachTemplatesEndOfTurn) {
  const GgufText bpe = testing::LoadGgufText("tests/golden/gguf/vocab_llama_bpe.gguf");
  auto llama3 = Format("llama3", bpe);
  ASSERT_NE(llama3, nullptr);
  EXPECT_EQ(llama3->end_of_turn_ids(), std::vector<int32_t>{902});
  auto ids = llama3->Tokenize({{"user", "Hi"}});
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], bpe.bos_id);  // the template's bos_token,
  EXPECT_NE((*ids)[1], bpe.bos_id);  // not the tokenizer's as well

  const GgufText spm = testing::LoadGgufText("tests/golden/gguf/vocab_spm.gguf");
  auto inst = Format("inst", spm);
  ASSERT_NE(inst, nullptr);
  EXPECT_EQ(inst->end_of_turn_ids(), std::vector<int32_t>{2});  // " </s>" after the reply
  auto gemma = Format("gemma", spm);  // <end_of_turn> is plain text in this vocabulary
  ASSERT_NE(gemma, nullptr);
  EXPECT_TRUE(gemma->end_of_turn_ids().empty());
  // A template's raise_exception is the request's error, with its message.
  auto refused = gemma->Render({{"system", "S"}, {"user", "U"}});
  EXPECT_EQ(refused.status().message(), "System role not supported");
}

// The hybrid families' templates (Qwen3.5-4B's, LFM2-8B-A1B's, LFM2.5's,
// from llama.cpp's models/templates) end an assistant turn with
// <|im_end|>, a control token of SmolLM2's vocabulary (2): Qwen3.5's
// writes an empty think block before the probe's reply, LFM2's a BOS and
// no system prompt. Each shows the tools it is given.
TEST(ChatFormatTest, HybridFamiliesEndATurnWithImEnd) {
  const GgufText v = testing::LoadGgufText("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_NE(v.tokenizer, nullptr) << "run tools/setup.sh";
  for (const char* name : {"qwen3.5", "lfm2", "lfm2.5", "lfm2.5-moe"}) {
    auto f = ChatFormat::Create(Template(name), name, "", "", v.tokenizer);
    ASSERT_TRUE(f.ok()) << name << ": " << f.status();
    EXPECT_EQ((*f)->end_of_turn_ids(), std::vector<int32_t>{2}) << name;
    EXPECT_TRUE((*f)->takes_tools()) << name;
  }
  // Without enable_thinking, Qwen3.5's prompt opens a think block.
  auto qwen = ChatFormat::Create(Template("qwen3.5"), "qwen3.5", "", "", v.tokenizer);
  ASSERT_TRUE(qwen.ok());
  auto text = (*qwen)->Render({{"user", "Hi"}});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
}

TEST(ChatFormatTest, ATemplateThatDoesNotParseIsRefusedNamingItsSource) {
  const GgufText spm = testing::LoadGgufText("tests/golden/gguf/vocab_spm.gguf");
  auto f = ChatFormat::Create("{% for m in messages %}", "model.gguf: tokenizer.chat_template", "", "",
                              spm.tokenizer);
  EXPECT_THAT(f.status().message(),
              HasSubstr("model.gguf: tokenizer.chat_template: chat template line 1: unexpected end"));
}

// The golden case's variables as a request carries them.
struct Conversation {
  std::vector<ChatMessage> messages;
  std::vector<ToolFunction> tools;
};
Conversation FromGolden(const nlohmann::ordered_json& vars) {
  Conversation c;
  for (const auto& m : vars["messages"]) {
    ChatMessage msg{m["role"], m["content"].is_null() ? "" : m["content"].get<std::string>()};
    msg.null_content = m["content"].is_null();
    if (m.contains("tool_calls")) {
      for (const auto& call : m["tool_calls"]) {
        msg.tool_calls.push_back({"", call["function"]["name"], call["function"]["arguments"].dump()});
      }
    }
    if (m.contains("name")) msg.name = m["name"];
    c.messages.push_back(std::move(msg));
  }
  for (const auto& t : vars["tools"]) {
    c.tools.push_back({t["function"]["name"], t["function"].value("description", ""),
                       t["function"]["parameters"].dump()});
  }
  return c;
}

// Whether a golden case's messages are all a request can carry (text
// content, calls; no content parts or reasoning) and its variables the
// ones ChatFormat passes.
bool RequestShaped(const nlohmann::ordered_json& vars) {
  if (vars.contains("enable_thinking") || vars.contains("keep_past_thinking")) return false;
  for (const auto& m : vars["messages"]) {
    if (m.contains("reasoning_content") || !(m["content"].is_string() || m["content"].is_null())) return false;
  }
  return true;
}

// A template that takes tools gets them, and the calls in the history, as
// transformers passes them: the same text as its apply_chat_template
// (make_chat_template_golden.py), for Qwen2.5's shape and the hybrid
// families' real templates (Qwen3.5's calls as <function=...> blocks of
// parameters, LFM2.5's as Python-like calls).
TEST(ChatFormatTest, ToolsAndCallsReachATemplateThatTakesThem) {
  const GgufText bpe = testing::LoadGgufText("tests/golden/gguf/vocab_llama_bpe.gguf");
  const auto cases = nlohmann::ordered_json::parse(
      testing::ReadFileOrEmpty("tests/golden/chat_templates/cases.json"), nullptr, false);
  ASSERT_FALSE(cases.is_discarded());
  std::map<std::string, int> checked;
  for (const auto& c : cases) {
    const std::string name = c["template"];
    if (name != "qwen2.5" && name != "qwen3.5" && name != "lfm2" && name != "lfm2.5" && name != "lfm2.5-moe") {
      continue;
    }
    if (c["variables"]["tools"].is_null() || !c.contains("output") || !RequestShaped(c["variables"])) continue;
    const auto& vars = c["variables"];
    auto f = ChatFormat::Create(Template(name), name, vars["bos_token"], vars["eos_token"], bpe.tokenizer);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE((*f)->takes_tools());
    if (!vars["add_generation_prompt"].get<bool>()) continue;
    const Conversation conv = FromGolden(vars);
    auto text = (*f)->Render(conv.messages, conv.tools);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["output"].get<std::string>()) << name << " / " << c["conversation"].get<std::string>();
    ++checked[name];
  }
  EXPECT_EQ(checked["qwen2.5"], 1);
  for (const char* name : {"qwen3.5", "lfm2", "lfm2.5", "lfm2.5-moe"}) EXPECT_EQ(checked[name], 3) << name;
}

// A template without tools (SmolLM2's) is told about them in its system
// message, sees past calls as their text and results as user turns.
TEST(ChatFormatTest, ATemplateWithoutToolsGetsThemDescribed) {
  const GgufText v = testing::LoadGgufText("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_NE(v.tokenizer, nullptr) << "run tools/setup.sh";
  auto f = ChatFormat::Create(v.chat_template, "smollm2", "", "", v.tokenizer);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE((*f)->takes_tools());
  const std::vector<ToolFunction> tools = {{"get_weather", "Weather in a city", R"({"type": "object"})"}};
  ChatMessage call{"assistant", ""};
  call.null_content = true;
  call.tool_calls.push_back({"call_0", "get_weather", R"({"city":"Paris"})"});
  ChatMessage result{"tool", "{\"temp\": 21}"};
  result.tool_call_id = "call_0";
  auto text = (*f)->Render({{"user", "Weather in Paris?"}, call, result}, tools);
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string want =
      "<|im_start|>system\n" + DescribeTools(tools) + "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n" + HermesCallText(call.tool_calls[0]) + "<|im_end|>\n<|im_start|>user\n" +
      ToolResultText(result) + "<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(*text, want);
  // Without tools, the template's own default system prompt.
  auto plain = (*f)->Render({{"user", "Hi"}});
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(*plain, ::testing::Not(HasSubstr("<tools>")));
}

}  // namespace
}  // namespace flover
