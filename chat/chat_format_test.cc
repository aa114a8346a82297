// Chat formatting with real tokenizers: SmolLM2's own template and
// vocabulary give llama.cpp's ids for a chat (make_gguf_golden.py), BOS
// appears once when a template writes it, and each template's end of turn
// is found from the template itself.
#include "chat/chat_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(ChatFormatTest, ATemplateThatDoesNotParseIsRefusedNamingItsSource) {
  const GgufText spm = testing::LoadGgufText("tests/golden/gguf/vocab_spm.gguf");
  auto f = ChatFormat::Create("{% for m in messages %}", "model.gguf: tokenizer.chat_template", "", "",
                              spm.tokenizer);
  EXPECT_THAT(f.status().message(),
              HasSubstr("model.gguf: tokenizer.chat_template: chat template line 1: unexpected end"));
}

}  // namespace
}  // namespace flover
