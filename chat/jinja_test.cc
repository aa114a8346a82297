// The template interpreter against transformers' own rendering (4.44.2's,
// and 5.23.0's for the hybrid families' real templates, Qwen3.5's and
// LFM2's; tests/golden/chat_templates, make_chat_template_golden.py): every
// case's output byte for byte, or the error raised; and what it refuses or
// stops, by name.
#include "chat/jinja.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "testing/files.h"

namespace flover::jinja {
namespace {

using ::testing::HasSubstr;

Value LoadJson(const std::string& path) {
  auto v = ParseJsonValue(testing::ReadFileOrEmpty(path), path);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : Value();
}

TEST(JinjaTest, RendersAsTransformersDoesByteForByte) {
  const Value templates = LoadJson("tests/golden/chat_templates/templates.json");
  const Value cases = LoadJson("tests/golden/chat_templates/cases.json");
  ASSERT_TRUE(templates.is_dict() && cases.is_list());
  std::map<std::string, Template> parsed;
  for (const auto& [name, source] : templates.dict()) {
    auto t = Template::Parse(source.string());
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    parsed.emplace(name, std::move(*t));
  }
  int outputs = 0, errors = 0;
  for (const Value& c : cases.list()) {
    const std::string name = c.Find("template")->string();
    const std::string what = name + " / " + c.Find("conversation")->string() + " / agp=" +
                             c.Find("variables")->Find("add_generation_prompt")->Str();
    auto out = parsed.at(name).Render(c.Find("variables")->dict());
    if (const Value* want = c.Find("output")) {
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      EXPECT_EQ(*out, want->string()) << what;
      ++outputs;
    } else {
      ASSERT_FALSE(out.ok()) << what << " rendered, but transformers failed with "
                             << c.Find("error")->string();
      EXPECT_THAT(out.status().message(), HasSubstr(c.Find("error")->string())) << what;
      ++errors;
    }
  }
  EXPECT_EQ(outputs, 337);
  EXPECT_EQ(errors, 31);
}

// gpt-oss's chat template (PyPI trl 1.16.0's copy of the original) as
// transformers 5.23.0 renders it (tests/golden/harmony/renderings.json,
// make_renderings.py), byte for byte but the date strftime_now gives (the
// fixture's is pinned); where the template writes what openai-harmony 0.0.8
// renders for the same conversation (7 of the 18: the default system
// message, each reasoning effort, an earlier turn's analysis dropped, the
// browser tool), ours is harmony's text too.
TEST(JinjaTest, RendersGptOssHarmonyPromptsAsTransformers) {
  const Value fixture = LoadJson("tests/golden/harmony/renderings.json");
  auto t = Template::Parse(fixture.Find("template")->string());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string date = fixture.Find("current_date")->string();
  int same_as_harmony = 0;
  for (const Value& c : fixture.Find("cases")->list()) {
    const std::string name = c.Find("name")->string();
    auto out = t->Render(c.Find("variables")->dict());
    ASSERT_TRUE(out.ok()) << name << ": " << out.status();
    std::string text = *out;
    const size_t at = text.find("Current date: ");
    ASSERT_NE(at, std::string::npos) << name;
    text.replace(at + 14, 10, date);
    EXPECT_EQ(text, c.Find("output")->string()) << name;
    if (c.Find("same_as_harmony")->Truthy()) {
      EXPECT_EQ(text, c.Find("harmony")->string()) << name;
      ++same_as_harmony;
    }
  }
  EXPECT_EQ(same_as_harmony, 7);
}

// Google's Gemma 4 chat templates (E2B/E4B's and 31B/26B-A4B's, as their
// repositories ship them: tests/golden/gemma4_chat/SOURCE.md) as
// transformers 5.23.0's apply_chat_template renders them: turns, system and
// developer roles, thinking on and off, earlier reasoning kept or dropped,
// tools with a schema, tool calls and their results, an image part; and the
// template's own refusal of a tool call whose arguments are a string.
TEST(JinjaTest, RendersGemma4PromptsAsTransformers) {
  for (const char* file : {"renderings.json", "renderings_large.json"}) {
    const Value fixture = LoadJson(std::string("tests/golden/gemma4_chat/") + file);
    auto t = Template::Parse(fixture.Find("template")->string());
    ASSERT_TRUE(t.ok()) << file << ": " << t.status();
    int outputs = 0;
    for (const Value& c : fixture.Find("cases")->list()) {
      const std::string name = c.Find("name")->string();
      auto out = t->Render(c.Find("variables")->dict());
      ASSERT_TRUE(out.ok()) << file << " " << name << ": " << out.status();
      EXPECT_EQ(*out, c.Find("output")->string()) << file << " " << name;
      ++outputs;
    }
    EXPECT_GE(outputs, 20) << file;
    for (const Value& c : fixture.Find("error_cases")->list()) {
      auto out = t->Render(c.Find("variables")->dict());
      ASSERT_FALSE(out.ok()) << file << " " << c.Find("name")->string() << " rendered";
      // transformers' message is the exception's type, then raise_exception's text.
      std::string error = c.Find("error")->string();
      if (error.rfind("TemplateError: ", 0) == 0) error = error.substr(15);
      EXPECT_THAT(std::string(out.status().message()), HasSubstr(error)) << file;
    }
  }
}

std::string ErrorOf(absl::string_view source, const Dict& vars = {}, RenderLimits limits = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return std::string(t.status().message());
  auto out = t->Render(vars, limits);
  return out.ok() ? "rendered: " + *out : std::string(out.status().message());
}

TEST(JinjaTest, RaiseExceptionGivesItsMessageAlone) {
  EXPECT_EQ(ErrorOf("a{{ raise_exception('Roles must alternate') }}b"), "Roles must alternate");
}

TEST(JinjaTest, RefusesWhatItDoesNotSupportByLine) {
  EXPECT_THAT(ErrorOf("ok\n{{ x | wordcount }}"), HasSubstr("line 2: filter 'wordcount' is not supported"));
  EXPECT_THAT(ErrorOf("{{ x is escaped }}"), HasSubstr("test 'escaped' is not supported"));
  EXPECT_THAT(ErrorOf("{% include 'x' %}"), HasSubstr("line 1: unknown or misplaced tag 'include'"));
  EXPECT_THAT(ErrorOf("{% for x in y %}"), HasSubstr("unexpected end of template, expected else or endfor"));
  EXPECT_THAT(ErrorOf("{% if x %}{% endfor %}"), HasSubstr("unknown or misplaced tag 'endfor'"));
  EXPECT_THAT(ErrorOf("{{ x + }}"), HasSubstr("unexpected end of expression"));
  EXPECT_THAT(ErrorOf("{{ 'open }}"), HasSubstr("unterminated string"));
  EXPECT_THAT(ErrorOf("{# no end"), HasSubstr("missing end of comment tag"));
  EXPECT_THAT(ErrorOf("{{ f(*args) }}"), HasSubstr("*args and **kwargs are not supported"));
  EXPECT_THAT(ErrorOf("a\n\n{% for x in y recursive %}{% endfor %}"),
              HasSubstr("line 3: recursive loops are not supported"));
}

TEST(JinjaTest, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(ErrorOf("{{ missing.attr }}"), "chat template line 1: 'missing' is undefined");
  EXPECT_EQ(ErrorOf("\n{{ d.a.b }}", {{"d", Value::MakeDict({})}}),
            "chat template line 2: 'dict object' has no attribute 'a'");
  EXPECT_THAT(ErrorOf("{{ 'a' + 1 }}"), HasSubstr("can only concatenate str (not \"int\") to str"));
  EXPECT_THAT(ErrorOf("{{ 1 // 0 }}"), HasSubstr("integer division or modulo by zero"));
  EXPECT_THAT(ErrorOf("{% for x in 5 %}{% endfor %}"), HasSubstr("'int' object is not iterable"));
  EXPECT_THAT(ErrorOf("{% set x = 1 %}{% set x.y = 2 %}"), HasSubstr("non-namespace object 'x'"));
}

TEST(JinjaTest, NoTemplateCanHangOrBalloon) {
  EXPECT_THAT(ErrorOf("{% for i in range(100000000) %}{% endfor %}"), HasSubstr("range() of more than"));
  RenderLimits small;
  small.max_steps = 1000;
  EXPECT_THAT(ErrorOf("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}", {}, small),
              HasSubstr("ran more than 1000 steps"));
  small = RenderLimits();
  small.max_output_bytes = 1000;
  EXPECT_THAT(ErrorOf("{{ 'x' * 100000 }}", {}, small), HasSubstr("output passed 1000 bytes"));
  EXPECT_THAT(ErrorOf("{% for i in range(200) %}0123456789{% endfor %}", {}, small),
              HasSubstr("output passed 1000 bytes"));
  EXPECT_THAT(ErrorOf("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
              HasSubstr("macro calls nested deeper than 64"));
  EXPECT_THAT(ErrorOf("{{ 2 ** 100 }}"), HasSubstr("integer power too large"));
}

// Found by the fuzzer: a namespace holding itself (or a list holding it) is a
// reference cycle; the render's end frees it (checked by LeakSanitizer
// under tools/sanitize.sh asan and the fuzzer's replay).
TEST(JinjaTest, ANamespaceMayHoldItself) {
  EXPECT_EQ(ErrorOf("{% set ns = namespace(x=1) %}{% set ns.self = ns %}{% set ns.l = [ns] %}"
                    "{{ ns.self.self.x }}"),
            "rendered: 1");
}

TEST(JinjaTest, JsonKeepsOrderAndIntegers) {
  auto v = ParseJsonValue(R"({"b": 1, "a": [1.0, 2, -3e2, "\u00e9\ud83e\udd99"], "c": null})", "test");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v->ToJson(), R"({"b": 1, "a": [1.0, 2, -300.0, "é🦙"], "c": null})");
  EXPECT_EQ(v->Str(), "{'b': 1, 'a': [1.0, 2, -300.0, 'é🦙'], 'c': None}");
  EXPECT_THAT(ParseJsonValue(R"(["\ud800"])", "t").status().message(), HasSubstr("lone surrogate"));
  EXPECT_THAT(ParseJsonValue("[1,]", "t").status().message(), HasSubstr("t: invalid JSON at byte 3"));
  EXPECT_THAT(ParseJsonValue("99999999999999999999", "t").status().message(), HasSubstr("too large"));
  std::string deep(200, '[');
  EXPECT_THAT(ParseJsonValue(deep, "t").status().message(), HasSubstr("nested too deeply"));
  EXPECT_EQ(PythonFloat(0.1), "0.1");
  EXPECT_EQ(PythonFloat(1e16), "1e+16");
  EXPECT_EQ(PythonFloat(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(PythonFloat(0.0001), "0.0001");
  EXPECT_EQ(PythonFloat(-2.5e-7), "-2.5e-07");
}

}  // namespace
}  // namespace flover::jinja
