// A constraint on a reply that starts inside its reasoning (the prompt
// opened <think>): free until the token that closes the reasoning, then
// held; without the open tag (enable_thinking false) held from the start.
// Qwen3.5's tokenizer fixture with its </think> added as one token, and a
// thinking-shaped template (chat/templates/chatml_think.jinja).
#include "server/request_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/grammar_constraint.h"
#include "nlohmann/json.hpp"
#include "testing/files.h"
#include "model/loader/tokenizer_files.h"

namespace flover::server {
namespace {

bool Allowed(const ConstraintState& s, int32_t token) {
  return (s.AllowedNext()[token / 32] >> (token % 32)) & 1u;
}

TEST(RequestConvertTest, AConstraintHoldsTheAnswerAfterTheReasoning) {
  nlohmann::json json = nlohmann::json::parse(testing::ReadFileOrEmpty("tests/golden/hf_tokenizers/qwen35/tokenizer.json"));
  const int think_end = static_cast<int>(json["model"]["vocab"].size()) + 100;
  json["added_tokens"].push_back({{"id", think_end}, {"content", "</think>"}, {"single_word", false},
                                  {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", false}});
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/qwen35_think";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  testing::WriteFile(dir + "/tokenizer.json", json.dump());
  auto hf = LoadDirectoryTokenizer(dir, think_end + 1, "qwen3_5_text");
  ASSERT_TRUE(hf.ok()) << hf.status();
  std::shared_ptr<const Tokenizer> tokenizer = *hf;
  ASSERT_EQ(tokenizer->Encode("</think>", false).value(), std::vector<int32_t>{think_end});
  auto tokens = std::make_shared<TokenBytes>(*tokenizer);
  GrammarConstraints grammars(tokens, {});
  auto chat = MakeChatSupport("chat/templates/chatml_think.jinja", {}, tokenizer);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ((*chat)->reasoning, ReasoningFormat::kThinkTags);
  const ConvertContext context{tokenizer.get(), chat->get(), tokens, tokenizer->vocab_size(), &grammars};
  ClientRequest in;
  in.prompt = ClientRequest::Prompt::kMessages;
  in.messages = {{"user", "Give me JSON."}};
  in.constraint = ClientRequest::Constraint{ClientRequest::Constraint::Kind::kJsonObject, {}, "", "response_format"};
  const int32_t word = tokenizer->Encode("Hello", false).value()[0];
  const int32_t brace = tokenizer->Encode("{", false).value()[0];

  auto r = ToEngineRequest(in, context, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  auto state = r->constraint->Start();
  EXPECT_TRUE(Allowed(*state, word));  // reasoning: free
  ASSERT_TRUE(state->Accept(word).ok());
  ASSERT_TRUE(Allowed(*state, think_end));
  ASSERT_TRUE(state->Accept(think_end).ok());
  EXPECT_FALSE(Allowed(*state, word));  // the answer: JSON
  EXPECT_TRUE(Allowed(*state, brace));

  // A reasoning budget of 2 tokens: then only </think>, then JSON; without
  // a constraint, anything after it.
  in.max_reasoning_tokens = 2;
  auto budget = ToEngineRequest(in, context, 1);
  ASSERT_TRUE(budget.ok()) << budget.status();
  auto b = budget->constraint->Start();
  ASSERT_TRUE(b->Accept(word).ok());
  EXPECT_TRUE(b->Complete());  // may end while within the budget
  ASSERT_TRUE(b->Accept(word).ok());
  EXPECT_FALSE(Allowed(*b, word));  // spent: the reasoning must close
  EXPECT_TRUE(Allowed(*b, think_end));
  EXPECT_FALSE(b->Complete());
  ASSERT_TRUE(b->Accept(think_end).ok());
  EXPECT_TRUE(Allowed(*b, brace));
  EXPECT_FALSE(Allowed(*b, word));
  ClientRequest free = in;
  free.constraint.reset();
  auto unconstrained = ToEngineRequest(free, context, 1);
  ASSERT_TRUE(unconstrained.ok()) << unconstrained.status();
  auto u = unconstrained->constraint->Start();
  ASSERT_TRUE(u->Accept(word).ok() && u->Accept(word).ok());
  EXPECT_FALSE(Allowed(*u, word));
  ASSERT_TRUE(u->Accept(think_end).ok());
  EXPECT_TRUE(Allowed(*u, word));  // the answer: free
  EXPECT_TRUE(u->Complete());
  in.max_reasoning_tokens.reset();

  // Thinking off: the prompt closed it, so JSON from the start.
  in.template_kwargs = R"({"enable_thinking": false})";
  auto off = ToEngineRequest(in, context, 1);
  ASSERT_TRUE(off.ok()) << off.status();
  auto held = off->constraint->Start();
  EXPECT_FALSE(Allowed(*held, word));
  EXPECT_TRUE(Allowed(*held, brace));
}

// gRPC's Constraint carries the string limits beside json_schema or
// json_object; beside any other kind (or none) they are refused by name.
TEST(RequestConvertTest, GrpcStringLimitsGoWithAJsonConstraintOnly) {
  const nlohmann::json json =
      nlohmann::json::parse(testing::ReadFileOrEmpty("tests/golden/hf_tokenizers/qwen35/tokenizer.json"));
  int vocab = static_cast<int>(json["model"]["vocab"].size());
  for (const auto& added : json["added_tokens"]) vocab = std::max(vocab, added["id"].get<int>() + 1);
  auto tokenizer = LoadDirectoryTokenizer("tests/golden/hf_tokenizers/qwen35", vocab, "qwen3_5_text");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto tokens = std::make_shared<TokenBytes>(**tokenizer);
  GrammarConstraints grammars(tokens, {});
  const ConvertContext context{tokenizer->get(), nullptr, tokens, (*tokenizer)->vocab_size(), &grammars};
  v1::GenerateRequest in;
  in.mutable_token_ids()->add_ids(1);
  in.mutable_constraint()->set_json_object(true);
  in.mutable_constraint()->set_max_string_length(16);
  in.mutable_constraint()->set_max_string_repeats(4);
  in.mutable_constraint()->set_max_item_repeats(5);
  const ClientRequest client = FromProto(in);
  ASSERT_TRUE(client.constraint.has_value());
  EXPECT_EQ(client.constraint->string_limits.max_length, 16);
  EXPECT_EQ(client.constraint->string_limits.max_repeats, 4);
  EXPECT_EQ(client.constraint->string_limits.max_item_repeats, 5);
  EXPECT_TRUE(ToEngineRequest(client, context, 1).ok());
  in.mutable_constraint()->set_regex("a+");
  auto regex = ToEngineRequest(FromProto(in), context, 1);
  ASSERT_FALSE(regex.ok());
  EXPECT_EQ(regex.status().message(),
            "constraint.max_string_length: applies only to JSON output (json_schema or json_object)");
  in.mutable_constraint()->set_json_object(true);
  in.mutable_constraint()->set_max_string_repeats(65);
  auto repeats = ToEngineRequest(FromProto(in), context, 1);
  ASSERT_FALSE(repeats.ok());
  EXPECT_EQ(repeats.status().message(), "constraint.max_string_repeats: must be from 2 to 64");
  v1::GenerateRequest none;
  none.mutable_token_ids()->add_ids(1);
  none.mutable_constraint()->set_max_string_repeats(3);
  EXPECT_FALSE(ToEngineRequest(FromProto(none), context, 1).ok());
}

}  // namespace
}  // namespace flover::server
