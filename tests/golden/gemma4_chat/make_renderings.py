#!/usr/bin/env python3
"""Reference renderings of Google's Gemma 4 chat templates through transformers.

Run with the oracle venv (transformers 5.23.0, Jinja2 3.1.6), offline:
  python3 tests/golden/gemma4_chat/make_renderings.py   # transformers 5.23.0 in a venv outside the repository

Writes, beside this file:
  renderings.json        chat_template.jinja        (google/gemma-4-E2B-it / E4B-it, sha256 0a2c8073...)
  renderings_large.json  chat_template_large.jinja  (google/gemma-4-31B-it / 26B-A4B-it / 12B-it, sha256 ae53464b...)

Each case is rendered with transformers.utils.chat_template_utils.render_jinja_template, the function
PreTrainedTokenizerBase.apply_chat_template calls (with template_kwargs = special_tokens_map + kwargs; the
only special token these templates read is bos_token, passed here as "<bos>"). The same variables are then
rendered a second time straight through transformers' compiled template (_compile_jinja_template(...).render),
without render_jinja_template's input processing (reasoning-field aliasing, plain-data copy), and the two
texts must be equal, so `variables` is exactly what a Jinja renderer needs to reproduce `output`.

The file format mirrors tests/golden/harmony/renderings.json: top-level template + cases, each case
{name, variables, output}. Cases where the template itself raises are kept apart in `error_cases`
({name, variables, error}), so a loop over `cases` only sees successful renderings.
"""
import copy
import hashlib
import json
import os
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
BOS = "<bos>"

TEMPLATES = {
    "renderings.json": {
        "file": "chat_template.jinja",
        "source": (
            "chat_template.jinja of google/gemma-4-E2B-it@3e22461f65e89153144f8adb70e3b8c2cc9845a7 and "
            "google/gemma-4-E4B-it@ee0ef6023621cff504d758262d4e04895a5af4a2 (Google's 2026-07-09 'Canonical' "
            "template, E2B/E4B variant), 18569 bytes, sha256 "
            "0a2c8073c878ab1da004bee933a998606537bbb62016310352c7285c3f01c5b5; see SOURCE.md"
        ),
    },
    "renderings_large.json": {
        "file": "chat_template_large.jinja",
        "source": (
            "chat_template.jinja of google/gemma-4-31B-it@842da379 (also 26B-A4B-it's and 12B-it's; Google's "
            "2026-07-09 'Canonical' template, large variant), 18683 bytes, sha256 "
            "ae53464bf3be25802b3a5b37def7fd89667067d7577049b3b2d74c4d8de4c6d4; see SOURCE.md"
        ),
    },
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["city"],
        },
    },
}

RICH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_products",
        "description": "Search the catalogue.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Free-text query"},
                "max_results": {"type": "integer", "description": "How many to return", "nullable": True},
                "in_stock": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags to match"},
                "price": {
                    "type": "object",
                    "description": "Price range",
                    "properties": {"min": {"type": "number"}, "max": {"type": "number"}},
                    "required": ["min"],
                },
            },
            "required": ["query"],
        },
    },
}

TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Current UTC time.", "parameters": {"type": "object", "properties": {}}},
}

U1 = {"role": "user", "content": "What is 2 + 2?"}
A1 = {"role": "assistant", "content": "2 + 2 = 4."}
U2 = {"role": "user", "content": "And times 3?"}
SYS = {"role": "system", "content": "You are a concise assistant."}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temperature": 18, "sky": "clear"}'}
FINAL = {"role": "assistant", "content": "It is 18 °C and clear in Paris."}
UW = {"role": "user", "content": "What's the weather in Paris?"}


def case(name, messages, agp, tools=None, **extra):
    v = {"messages": messages, "add_generation_prompt": agp, "bos_token": BOS}
    if tools is not None:
        v["tools"] = tools
    v.update(extra)
    return name, v


CASES = [
    case("user_only_gen", [U1], True),
    case("user_only_no_gen", [U1], False),
    case("user_only_thinking_on", [U1], True, enable_thinking=True),
    case("user_only_thinking_off_explicit", [U1], True, enable_thinking=False),
    case("system_user_gen", [SYS, U1], True),
    case("system_user_thinking_on", [SYS, U1], True, enable_thinking=True),
    case("developer_role_as_system", [{"role": "developer", "content": "Answer in French."}, U1], True),
    case("multiturn_gen", [U1, A1, U2], True),
    case("multiturn_complete_no_gen", [SYS, U1, A1], False),
    case(
        "assistant_thought_channel_stripped",
        [U1, {"role": "assistant", "content": "<|channel>thought\nadd them<channel|>4"}, U2],
        True,
    ),
    case(
        "reasoning_before_last_user_dropped",
        [U1, {"role": "assistant", "content": "4", "reasoning_content": "2 plus 2"}, U2],
        True,
        enable_thinking=True,
    ),
    case("tools_defined_user_gen", [UW], True, tools=[WEATHER_TOOL]),
    case("tools_rich_schema", [SYS, UW], True, tools=[RICH_TOOL, TIME_TOOL]),
    case("tool_call_pending_gen", [UW, CALL], True, tools=[WEATHER_TOOL]),
    case("tool_call_and_result_gen", [UW, CALL, RESULT], True, tools=[WEATHER_TOOL]),
    case("tool_call_and_result_thinking_on", [UW, CALL, RESULT], True, tools=[WEATHER_TOOL], enable_thinking=True),
    case("tool_round_then_final_answer_no_gen", [UW, CALL, RESULT, FINAL], False, tools=[WEATHER_TOOL]),
    case(
        "tool_round_final_then_user_gen",
        [UW, CALL, RESULT, FINAL, {"role": "user", "content": "Thanks!"}],
        True,
        tools=[WEATHER_TOOL],
    ),
    case(
        "tool_call_with_reasoning_after_last_user",
        [UW, dict(CALL, reasoning_content="I should call the weather tool."), RESULT],
        True,
        tools=[WEATHER_TOOL],
        enable_thinking=True,
    ),
    case(
        "preserve_thinking_on_earlier_tool_call",
        [UW, dict(CALL, reasoning_content="Need weather."), RESULT, FINAL, {"role": "user", "content": "And tomorrow?"}],
        True,
        tools=[WEATHER_TOOL],
        enable_thinking=True,
        preserve_thinking=True,
    ),
    case(
        "content_parts_text_and_image",
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  Describe this.  "}]}],
        True,
    ),
    case(
        "unicode_and_whitespace_trim",
        [{"role": "system", "content": "  Réponds en français.\n"}, {"role": "user", "content": "\n  Ça va? 你好 🙂  \n"}],
        True,
    ),
    case("empty_messages_gen", [], True),
]

ERROR_CASES = [
    case(
        "tool_call_string_arguments_raises",
        [UW, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}],
        True,
        tools=[WEATHER_TOOL],
    ),
]


def render(template, v):
    kw = {k: val for k, val in v.items() if k not in ("messages", "tools", "add_generation_prompt")}
    out, _ = render_jinja_template(
        conversations=[copy.deepcopy(v["messages"])],
        tools=copy.deepcopy(v.get("tools")),
        chat_template=template,
        add_generation_prompt=v["add_generation_prompt"],
        **copy.deepcopy(kw),
    )
    direct = _compile_jinja_template(template).render(**copy.deepcopy(v))
    if direct != out[0]:
        raise AssertionError("direct render differs from render_jinja_template")
    return out[0]


def main():
    for out_name, spec in TEMPLATES.items():
        raw = open(os.path.join(HERE, spec["file"]), "rb").read()
        template = raw.decode("utf-8")
        cases = []
        for name, v in CASES:
            cases.append({"name": name, "variables": v, "output": render(template, v)})
        errors = []
        for name, v in ERROR_CASES:
            try:
                render(template, v)
            except Exception as e:  # the template's raise_exception -> jinja2.TemplateError
                errors.append({"name": name, "variables": v, "error": f"{type(e).__name__}: {e}"})
            else:
                raise AssertionError(f"{name} rendered")
        doc = {
            "generator": "make_renderings.py (transformers.utils.chat_template_utils.render_jinja_template)",
            "template_source": spec["source"],
            "template_file": spec["file"],
            "template_sha256": hashlib.sha256(raw).hexdigest(),
            "transformers_version": transformers.__version__,
            "jinja2_version": jinja2.__version__,
            "template": template,
            "cases": cases,
            "error_cases": errors,
        }
        with open(os.path.join(HERE, out_name), "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(out_name, len(cases), "cases", len(errors), "error cases")


if __name__ == "__main__":
    sys.exit(main())
