// The OpenAI request parser and error shape, alone; the API end to end (the
// real server, the `openai` package, curl) is tests/python/openai_test.py.
#include "server/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/json_body.h"
#include "server/status_util.h"
#include "util/field_error.h"

namespace flover::server {
namespace {

using ::testing::HasSubstr;

constexpr char kModel[] = "builtin:tiny";

// The "error" object of an OpenAI error body, parsed.
Json Error(const absl::Status& status) { return Json::parse(OpenAiErrorBody(status))["error"]; }

std::string ErrorOf(const std::string& body) {
  auto r = ParseCompletionRequest(body, kModel);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(OpenAiApiTest, ParsesEveryField) {
  auto r = ParseCompletionRequest(
      R"({"model": "builtin:tiny", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5,
          "top_p": 0.9, "top_k": 5, "seed": 42, "stop": ["a", "bc"], "logprobs": 1,
          "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true,
          "repetition_penalty": 1.1, "n": 1, "best_of": 1, "frequency_penalty": 0,
          "presence_penalty": 0, "logit_bias": {}, "suffix": "", "user": "someone"})",
      kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  const ClientRequest& g = r->request;
  EXPECT_EQ(g.text, "Hello");
  EXPECT_EQ(g.max_new_tokens, 7u);
  EXPECT_FLOAT_EQ(*g.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*g.top_p, 0.9f);
  EXPECT_EQ(g.top_k, 5);
  EXPECT_EQ(g.seed, 42u);
  EXPECT_FLOAT_EQ(*g.repetition_penalty, 1.1f);
  EXPECT_THAT(g.stop_strings, ::testing::ElementsAre("a", "bc"));
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_TRUE(g.return_logprobs);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_FALSE(r->echo);
}

TEST(OpenAiApiTest, ConstraintsFromResponseFormatAndTheGuidedFields) {
  using Kind = ClientRequest::Constraint::Kind;
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  auto schema = ParseChatRequest("{" + user + R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "t", "strict": true, "schema": {"type": "object"}}}})", kModel);
  ASSERT_TRUE(schema.ok()) << schema.status();
  ASSERT_TRUE(schema->request.constraint.has_value());
  EXPECT_EQ(schema->request.constraint->kind, Kind::kJsonSchema);
  EXPECT_EQ(Json::parse(schema->request.constraint->text), Json::parse(R"({"type": "object"})"));
  EXPECT_EQ(schema->request.constraint->field, "response_format.json_schema.schema");
  auto object = ParseChatRequest("{" + user + R"(, "response_format": {"type": "json_object"}})", kModel);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(object->request.constraint->kind, Kind::kJsonObject);
  auto text = ParseChatRequest("{" + user + R"(, "response_format": {"type": "text"}})", kModel);
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->request.constraint.has_value());
  auto regex = ParseCompletionRequest(R"({"prompt": "x", "guided_regex": "[a-z]+"})", kModel);
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(regex->request.constraint->kind, Kind::kRegex);
  EXPECT_EQ(regex->request.constraint->text, "[a-z]+");
  auto grammar = ParseCompletionRequest(R"({"prompt": "x", "guided_grammar": "root ::= \"a\""})", kModel);
  ASSERT_TRUE(grammar.ok());
  EXPECT_EQ(grammar->request.constraint->kind, Kind::kGrammar);
  auto json = ParseCompletionRequest(R"({"prompt": "x", "guided_json": "{\"type\": \"array\"}"})", kModel);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(json->request.constraint->text, R"({"type": "array"})");
  auto choice = ParseCompletionRequest(R"({"prompt": "x", "guided_choice": ["a", "b"]})", kModel);
  ASSERT_TRUE(choice.ok());
  EXPECT_THAT(choice->request.constraint->choices, ::testing::ElementsAre("a", "b"));
}

TEST(OpenAiApiTest, StringLimitsGoWithAJsonConstraintOnly) {
  auto limited = ParseCompletionRequest(
      R"({"prompt": "x", "guided_json": {"type": "object"}, "max_string_length": 64, "max_string_repeats": 4,
          "max_item_repeats": 3})",
      kModel);
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(limited->request.constraint->string_limits.max_length, 64);
  EXPECT_EQ(limited->request.constraint->string_limits.max_repeats, 4);
  EXPECT_EQ(limited->request.constraint->string_limits.max_item_repeats, 3);
  auto object = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_object"}, "max_string_length": 8})", kModel);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->request.constraint->string_limits.max_length, 8);
  EXPECT_EQ(object->request.constraint->string_limits.max_repeats, 0);
  auto error = [](const std::string& body) {
    auto r = ParseCompletionRequest(body, kModel);
    EXPECT_FALSE(r.ok()) << body;
    return r.ok() ? std::string() : ErrorField(r.status()) + "|" + std::string(r.status().message());
  };
  EXPECT_THAT(error(R"({"prompt": "x", "max_string_length": 8})"),
              HasSubstr("max_string_length|max_string_length: applies only to JSON output"));
  EXPECT_THAT(error(R"({"prompt": "x", "guided_regex": "a+", "max_string_repeats": 3})"),
              HasSubstr("max_string_repeats|max_string_repeats: applies only to JSON output"));
  EXPECT_THAT(error(R"({"prompt": "x", "guided_json": {}, "max_string_length": 0})"),
              HasSubstr("max_string_length: must be an integer from 1 to 1048576"));
  EXPECT_THAT(error(R"({"prompt": "x", "guided_json": {}, "max_string_repeats": 1})"),
              HasSubstr("max_string_repeats: must be an integer from 2 to 64"));
  EXPECT_THAT(error(R"({"prompt": "x", "guided_choice": ["a"], "max_item_repeats": 3})"),
              HasSubstr("max_item_repeats|max_item_repeats: applies only to JSON output"));
  EXPECT_THAT(error(R"({"prompt": "x", "guided_json": {}, "max_item_repeats": 65})"),
              HasSubstr("max_item_repeats: must be an integer from 2 to 64"));
  EXPECT_THAT(error(R"({"prompt": "x", "guided_json": {}, "max_string_length": "8"})"),
              HasSubstr("max_string_length: must be an integer"));
}

TEST(OpenAiApiTest, PenaltiesBiasAndMinP) {
  auto r = ParseCompletionRequest(
      R"({"prompt": "x", "presence_penalty": 0.5, "frequency_penalty": -1, "min_p": 0.1,
          "logit_bias": {"7": -100, "42": 2.5}})",
      kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->request.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->request.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(r->request.min_p, 0.1f);
  EXPECT_THAT(r->request.logit_bias,
              ::testing::UnorderedElementsAre(::testing::Pair(7u, -100.0f), ::testing::Pair(42u, 2.5f)));
}

TEST(OpenAiApiTest, DefaultsAreLeftToTheSharedConversion) {
  auto r = ParseCompletionRequest(R"({"prompt": "x"})", kModel);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->request.max_new_tokens.has_value());  // 16, as on gRPC
  EXPECT_FALSE(r->request.temperature.has_value());
  EXPECT_FALSE(r->request.seed.has_value());
  EXPECT_FALSE(r->request.return_logprobs);
  EXPECT_FALSE(r->stream);
}

TEST(OpenAiApiTest, PromptForms) {
  for (const char* body : {R"({"prompt": [5, 6, 7]})", R"({"prompt": [[5, 6, 7]]})"}) {
    auto r = ParseCompletionRequest(body, kModel);
    ASSERT_TRUE(r.ok()) << body << ": " << r.status();
    EXPECT_THAT(r->request.token_ids, ::testing::ElementsAre(5, 6, 7)) << body;
  }
  auto one = ParseCompletionRequest(R"({"prompt": ["only one"]})", kModel);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->request.text, "only one");
  auto stop = ParseCompletionRequest(R"({"prompt": "x", "stop": "end"})", kModel);
  ASSERT_TRUE(stop.ok());
  EXPECT_THAT(stop->request.stop_strings, ::testing::ElementsAre("end"));
  auto no_limit = ParseCompletionRequest(R"({"prompt": "x", "top_k": -1})", kModel);
  ASSERT_TRUE(no_limit.ok());
  EXPECT_EQ(no_limit->request.top_k, 0);
}

TEST(OpenAiApiTest, RefusalsNameTheField) {
  EXPECT_THAT(ErrorOf("{"), HasSubstr("request body"));
  EXPECT_THAT(ErrorOf("{}"), HasSubstr("prompt: is required"));
  EXPECT_THAT(ErrorOf(R"({"prompt": []})"), HasSubstr("prompt: is empty"));
  EXPECT_THAT(ErrorOf(R"({"prompt": 3})"), HasSubstr("prompt: must be a string or a list"));
  EXPECT_THAT(ErrorOf(R"({"prompt": ["a", "b"]})"), HasSubstr("several prompts"));
  EXPECT_THAT(ErrorOf(R"({"prompt": [1, -2]})"), HasSubstr("prompt: token ids must be"));
  EXPECT_THAT(ErrorOf(R"({"prompt": [1.5]})"), HasSubstr("prompt: token ids must be"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "n": 17})"), HasSubstr("n: at most 16, got 17"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "n": 0})"), HasSubstr("n: must be a positive integer"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "best_of": 3})"), HasSubstr("best_of: only 1"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "presence_penalty": "high"})"),
              HasSubstr("presence_penalty: must be a number"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "logit_bias": {"five": 1}})"),
              HasSubstr("logit_bias: keys must be token ids"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "logit_bias": {"-5": 1}})"),
              HasSubstr("logit_bias: keys must be token ids"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "logit_bias": {"5": "up"}})"),
              HasSubstr("logit_bias: values must be numbers"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "logit_bias": [5]})"), HasSubstr("logit_bias: must be an object"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "suffix": "s"})"), HasSubstr("suffix: is not supported"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "logprobs": 6})"),
              HasSubstr("logprobs: at most 5 is supported, got 6"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "max_tokens": "ten"})"), HasSubstr("max_tokens: must be"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "temperature": "hot"})"),
              HasSubstr("temperature: must be a number"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "stream": "yes"})"),
              HasSubstr("stream: must be true or false"));
  EXPECT_THAT(ErrorOf(R"({"prompt": "x", "stop": [1]})"), HasSubstr("stop: must be a string"));
  auto wrong_model = ParseCompletionRequest(R"({"model": "gpt-4", "prompt": "x"})", kModel);
  EXPECT_EQ(wrong_model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(wrong_model.status().message()),
              HasSubstr("\"gpt-4\" is not served here (this server serves \"builtin:tiny\")"));
}

TEST(OpenAiApiTest, ChatMessagesAndTheirFields) {
  auto r = ParseChatRequest(
      R"({"model": "builtin:tiny", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": "Hello", "name": "bot"}],
          "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3, "temperature": 0,
          "stream": true, "stream_options": {"include_usage": true}, "tools": [],
          "response_format": {"type": "text"}, "seed": 5})",
      kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<ChatMessage>& m = r->request.messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].role, "user");
  EXPECT_EQ(m[1].content, "Hi\nthere");  // text parts, joined
  EXPECT_EQ(r->request.max_new_tokens, 9u);
  EXPECT_TRUE(r->request.return_logprobs);
  EXPECT_EQ(r->request.top_logprobs, 3u);
  EXPECT_TRUE(r->stream && r->include_usage);
  // max_tokens, the older name, works too.
  auto old = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})", kModel);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->request.max_new_tokens, 4u);
}

TEST(OpenAiApiTest, ToolsToolChoiceAndPastCalls) {
  auto r = ParseChatRequest(
      R"({"messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
              {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 3}"}],
          "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}}],
          "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
          "parallel_tool_calls": false})",
      kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  const ClientRequest& c = r->request;
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_TRUE(c.messages[1].null_content);
  ASSERT_EQ(c.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(c.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(c.messages[1].tool_calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(c.messages[2].tool_call_id, "call_1");
  ASSERT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.tools[0].description, "Weather now");
  EXPECT_EQ(c.tools[0].parameters, R"({"type":"object","properties":{"city":{"type":"string"}}})");
  EXPECT_EQ(ToolChoiceOf(c), ToolChoice::kNamed);
  EXPECT_EQ(c.tool_choice_name, "get_weather");
  EXPECT_FALSE(c.parallel_tool_calls);
  // Defaults: auto with tools, none without.
  auto plain = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]})",
      kModel);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(ToolChoiceOf(plain->request), ToolChoice::kAuto);
  EXPECT_TRUE(plain->request.parallel_tool_calls);
  auto none = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", kModel);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(ToolChoiceOf(none->request), ToolChoice::kRequired);  // refused when converted: no tools
}

TEST(OpenAiApiTest, ChatRefusalsNameTheField) {
  auto error = [](const std::string& body) {
    auto r = ParseChatRequest(body, kModel);
    EXPECT_FALSE(r.ok()) << body;
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_THAT(error("{}"), HasSubstr("messages: is required"));
  EXPECT_THAT(error(R"({"messages": []})"), HasSubstr("messages: is empty"));
  EXPECT_THAT(error(R"({"messages": [{"content": "x"}]})"), HasSubstr("messages[0].role: must be a string"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user"}]})"), HasSubstr("messages[0].content: is required"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})"),
              HasSubstr("messages[0].content[0].image_url.url: must be a string"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})"),
              HasSubstr("messages[0].content[0].type: 'input_audio' is not supported (text and image_url)"));
  EXPECT_THAT(error(R"({"messages": [{"role": "user", "content": [{"type": "image_url",
                                     "image_url": {"url": "data:image/png;base64,%%%"}}]}]})"),
              HasSubstr("messages[0].content[0].image_url.url: the data: URL's base64 does not decode"));
  // An image part's bytes, and the message's parts in order for the template.
  auto parsed = ParseChatRequest(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]}]})",
                                 kModel);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->request.images.size(), 1u);
  EXPECT_EQ(parsed->request.images[0].bytes, "hi");
  EXPECT_EQ(parsed->request.images[0].field, "messages[0].content[1]");
  ASSERT_EQ(parsed->request.messages[0].parts.size(), 2u);
  EXPECT_FALSE(parsed->request.messages[0].parts[0].image);
  EXPECT_TRUE(parsed->request.messages[0].parts[1].image);
  EXPECT_THAT(error(R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{}]}]})"),
              HasSubstr("messages[0].tool_calls[0].function: must be an object"));
  EXPECT_THAT(error(R"({"messages": [{"role": "assistant", "function_call": {}}]})"),
              HasSubstr("messages[0].function_call: is not supported (the older API; send tool_calls)"));
  EXPECT_THAT(error("{" + user + R"(, "n": 20})"), HasSubstr("n: at most 16, got 20"));
  EXPECT_THAT(error("{" + user + R"(, "tools": [{"type": "function"}]})"),
              HasSubstr("tools[0].function: must be an object"));
  EXPECT_THAT(error("{" + user + R"(, "tools": [{"type": "retrieval"}]})"),
              HasSubstr("tools[0].type: must be \"function\""));
  EXPECT_THAT(error("{" + user + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]})"),
              HasSubstr("tools[0].function.parameters: must be a JSON Schema"));
  EXPECT_THAT(error("{" + user + R"(, "tool_choice": "any"})"), HasSubstr("tool_choice: 'any' is not a choice"));
  EXPECT_THAT(error("{" + user + R"(, "tool_choice": {"type": "function"}})"), HasSubstr("tool_choice: must be none"));
  EXPECT_THAT(error("{" + user + R"(, "functions": []})"), HasSubstr("functions: is not supported"));
  EXPECT_THAT(error("{" + user + R"(, "parallel_tool_calls": 1})"), HasSubstr("parallel_tool_calls: must be true or false"));
  EXPECT_THAT(error("{" + user + R"(, "response_format": {"type": "yaml"}})"),
              HasSubstr("response_format.type: 'yaml' is not supported"));
  EXPECT_THAT(error("{" + user + R"(, "response_format": {"type": "json_schema"}})"),
              HasSubstr("response_format.json_schema: must be an object"));
  EXPECT_THAT(error("{" + user + R"(, "response_format": {"type": "json_object"}, "guided_regex": "a"})"),
              HasSubstr("guided_regex: only one constraint per request"));
  EXPECT_THAT(error("{" + user + R"(, "guided_json": 5})"), HasSubstr("guided_json: must be a JSON Schema"));
  EXPECT_THAT(error("{" + user + R"(, "top_logprobs": 2})"), HasSubstr("top_logprobs: needs logprobs: true"));
  EXPECT_THAT(error("{" + user + R"(, "logprobs": true, "top_logprobs": 21})"),
              HasSubstr("top_logprobs: at most 20, got 21"));
  EXPECT_THAT(error("{" + user + R"(, "logprobs": 1})"), HasSubstr("logprobs: must be true or false"));
  auto wrong_model = ParseChatRequest("{" + user + R"(, "model": "gpt-4o"})", kModel);
  EXPECT_EQ(wrong_model.status().code(), absl::StatusCode::kNotFound);
  // Errors name their field beside the message, not only in it.
  EXPECT_EQ(ErrorField(wrong_model.status()), "model");
  EXPECT_EQ(ErrorField(ParseChatRequest(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})",
                                        kModel)
                           .status()),
            "messages[0].content[0].type");
  EXPECT_EQ(ErrorField(ParseChatRequest("{" + user + R"(, "stream_options": {"include_usage": 1}})", kModel)
                           .status()),
            "stream_options.include_usage");
  // Errors on a message name its place as the error's param.
  EXPECT_EQ(Error(FieldError("messages[2].role", "'tool' is not supported"))["param"],
            "messages[2].role");
}

TEST(OpenAiApiTest, ErrorsTakeOpenAisShapeAndTheApisFieldNames) {
  const absl::Status engine_error =
      FieldError("max_new_tokens", "prompt (5 tokens) + max_new_tokens (9) exceeds max_seq_len (8)");
  EXPECT_EQ(HttpStatusOf(engine_error), 400);
  EXPECT_EQ(Json::parse(OpenAiErrorBody(engine_error)),
            Json::parse(R"json({"error": {"message": "max_tokens: prompt (5 tokens) + max_tokens (9) )json"
                        R"json(exceeds max_seq_len (8)", "type": "invalid_request_error", )json"
                        R"json("param": "max_tokens", "code": "invalid_argument"}})json"));
  const Json no_tokenizer = Error(FieldError("text", "the model has no tokenizer"));
  EXPECT_EQ(no_tokenizer["message"], "prompt: the model has no tokenizer");
  EXPECT_EQ(no_tokenizer["type"], "invalid_request_error");
  EXPECT_EQ(no_tokenizer["param"], "prompt");
  EXPECT_EQ(Error(FieldError("stop_strings", "must not be empty"))["param"], "stop");
  // The param comes from the error, not from its text.
  EXPECT_TRUE(Error(absl::InvalidArgumentError("top_p: looks like a field"))["param"].is_null());
  EXPECT_EQ(Error(FieldError("top_p", "must be in (0, 1], got 0"))["param"], "top_p");
  const Json full = Error(absl::ResourceExhaustedError("the queue is full"));
  EXPECT_EQ(full["type"], "rate_limit_error");
  EXPECT_TRUE(full["param"].is_null());
  // Bytes that are not UTF-8 (a client's own string echoed back) still make
  // valid JSON.
  const Json odd = Error(FieldError("messages[0].role", "'\xff\xfe' is not supported"));
  EXPECT_EQ(odd["message"], "messages[0].role: '\xEF\xBF\xBD\xEF\xBF\xBD' is not supported");
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("")), 429);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("")), 503);
  EXPECT_EQ(HttpStatusOf(absl::UnauthenticatedError("")), 401);
  EXPECT_EQ(HttpStatusOf(absl::NotFoundError("")), 404);
  EXPECT_EQ(HttpStatusOf(absl::InternalError("")), 500);
}

}  // namespace
}  // namespace flover::server
