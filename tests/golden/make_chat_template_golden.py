#!/usr/bin/env python3
"""Writes tests/golden/chat_templates/cases.json: chat templates rendered by
transformers' own apply_chat_template machinery (render_jinja_template and
its _compile_jinja_template: jinja2's ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and the
generation block, tojson as json.dumps(ensure_ascii=False),
raise_exception), the oracle Flover's template interpreter must match byte
for byte. Written with transformers 5.23.0 (jinja2 3.1.6); the cases of
the templates before the hybrid families were first written with 4.44.2,
and 5.23.0 renders every one of them byte for byte the same.

Templates: SmolLM2-135M-Instruct's (from its GGUF file, as shipped), and ones
written here in the shapes of the families people serve — Llama 3 (header
tokens, trimmed content), Llama 2 / Mistral ([INST], <<SYS>>, alternation
checked with raise_exception), Qwen2.5 (a default system prompt, tools and
tool calls through tojson), Gemma (no system role: raise_exception; "model"
for assistant), Phi-3 — and a "kitchen sink" that uses every construct the
interpreter claims (macros, namespace, filters, tests, string methods,
slices, loop attributes, whitespace control of every kind, raw, filter and
set blocks). The kitchen sink's break/continue need jinja2's loopcontrols
extension, which transformers 4.44 did not load (5.x does).

The hybrid families' real templates, from llama.cpp's models/templates at
commit 34af94cd9 (LLAMA_CPP_GIT=its git directory; without it they are kept
from templates.json): Qwen3.5-4B's (content parts and images, tools, calls
as <function=...> blocks with <parameter=...>, tool responses folded into
user turns, reasoning_content and <think> in content, enable_thinking) and
LFM2's: LFM2.5-Instruct (keep_past_thinking), LFM2-8B-A1B (tool lists and
responses in their tokens) and LFM2.5-8B-A1B (calls as Python-like calls,
a generation block). Their conversations add reasoning, several calls,
content parts, and the templates' own errors; Qwen3.5 renders each with
enable_thinking absent, true and false, LFM2.5-Instruct with
keep_past_thinking absent and true. Messages are stored as the template
sees them (transformers copies a message's reasoning_content to thinking).
And Granite 4.0's (ibm-granite-granite-4.0.jinja, the template the Granite
4.0 models ship, the hybrid -H ones included: a system prompt built from
the tools and the documents, or a default one; content parts joined by
newlines; calls as <tool_call> JSON; tool responses folded into user
turns; available_tools in place of tools), with two conversations of its
own that pass documents (alone, and with tools and a system prompt), each
rendered with available_tools absent and set. (llama.cpp's
models/templates has no Qwen3-Next template at that commit.)

Each case: template name, the variables (messages, add_generation_prompt,
bos_token, eos_token, tools, documents — transformers passes tools and
documents as None when there are none), and the output, or the error
raised (raise_exception's, or a type error such as a list added to a
string).

    LLAMA_CPP_GIT=/path/to/llama.cpp/.git \\
        python3 tests/golden/make_chat_template_golden.py  (transformers 5.x, jinja2, gguf)
"""
import json
import os
import subprocess

import gguf
import jinja2
from transformers.utils.chat_template_utils import _alias_reasoning_fields, render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
SMOLLM2 = os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

LLAMA3 = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if system_message %}
    {{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}
{%- endif %}
{%- for message in loop_messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

INST = """{% if messages[0]['role'] == 'system' %}
{% set loop_messages = messages[1:] %}
{% set system_message = messages[0]['content'] %}
{% else %}
{% set loop_messages = messages %}
{% set system_message = false %}
{% endif %}
{% for message in loop_messages %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% if loop.index0 == 0 and system_message != false %}
        {% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}
    {% else %}
        {% set content = message['content'] %}
    {% endif %}
    {% if message['role'] == 'user' %}
        {{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}
    {% elif message['role'] == 'assistant' %}
        {{ ' ' + content.strip() + ' ' + eos_token }}
    {% endif %}
{% endfor %}
"""

QWEN = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call functions. Their signatures are in <tools></tools>:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
         "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
         "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/"
         "user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' "
         "%}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + "
         "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
         "{{'<start_of_turn>model\\n'}}{% endif %}")

PHI3 = ("{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + "
        "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + "
        "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + "
        "message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")

KITCHEN_SINK = """{#- every construct the interpreter claims -#}
{% macro turn(role, text, sep='\\n', upper=false) -%}
<{{ role | upper if upper else role }}>{{ sep }}{{ text }}
{%- endmacro %}
{% set ns = namespace(count=0, roles=[], last=none) %}
{% for m in messages if m.role != 'tool' %}
  {% set ns.count = ns.count + 1 %}
  {% set ns.roles = ns.roles + [m.role] %}
  {% set ns.last = m %}
  [{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.first }} {{ loop.last }} {{ loop.cycle('odd', 'even') }}]
  {{ turn(m.role, m.content | trim, upper=loop.first) }}
  {%+ if m.content is string and m.content.startswith('Hi') %}greeting{% endif +%}
  {% if 'name' in m %}name={{ m.name }}{% elif m.get('name', 'anon') == 'anon' %}anon{% endif %}
{% else %}
no messages
{% endfor %}
count={{ ns.count }} roles={{ ns.roles | join(',') }} unique={{ ns.roles | unique | list }} last={{ ns.last.role if ns.last else 'none' }}
{{ messages | length }} {{ messages | map(attribute='role') | list }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | join('+') }}
{{ (messages | first).role }} {{ (messages | last)['role'] }} {{ messages[-1:] | length }} {{ messages[::2] | length }} {{ messages[1:3] | length }}
{{- ' x ' }}{{ 'abc'[::-1] }} {{ 'Hello World'[6:] }} {{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'x-y-z'.split('-', 1) }}
{{ '  pad  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  l'.lstrip() }}|{{ 'r  '.rstrip() }}|{{ 'hello'.replace('l', 'L') }}|{{ 'hello'.replace('l', 'L', 1) }}
{{ 'Title me' | title }} {{ 'shout' | upper }} {{ 'QUIET' | lower }} {{ 'cap it' | capitalize }} {{ 'mIxEd cAsE'.title() }} {{ 'abc'.upper() }}
{{ 'hello world'.find('o') }} {{ 'banana'.count('a') }} {{ '-'.join(['a', 'b']) }} {{ 'ab'.endswith('b') }} {{ 'ab'.startswith(('x', 'a')) }}
{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1.5 + 1 }} {{ 3 * 'ab' }} {{ [1] * 2 }} {{ 10 - 2.5 }} {{ -(3) }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e20 }} {{ 1.0 }}
{{ none }} {{ true }} {{ false }} {{ [1, 'two', none, 3.5, {'k': (1, 2)}] }} {{ {'a': 'it\\'s', 'b': "q\\"uote"} }} {{ ('solo',) }}
{{ 1 < 2 < 3 }} {{ 3 > 2 == 2 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 in [1, 2] }} {{ 'z' not in 'abc' }} {{ 'k' in {'k': 1} }}
{{ undefined_var is defined }} {{ undefined_var is undefined }} {{ none is none }} {{ 1 is number }} {{ 1.5 is float }} {{ 2 is integer }} {{ true is boolean }} {{ {} is mapping }} {{ [] is sequence }} {{ 'x' is iterable }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 2 is ge 2 }} {{ 'a' is lower }} {{ 'A' is upper }} {{ 1 is in [1] }} {{ none is sameas none }}
{{ undefined_var | default('dflt') }} {{ '' | default('empty', true) }} {{ none | default('kept') }} {{ undefined_var | d('d') }} {{ undefined_var | length }}
{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ ['a', 'A', 'b'] | unique | list }}
{{ [1, 0, 2, none] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ [1, 2, 3] | map('string') | join }} {{ ['1', '2'] | map('int') | sum if false else 'nosum' }}
{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int(7) }} {{ '2.5' | float }} {{ 3 | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 2.1 | round(method='ceil') }} {{ 5 | string }} {{ [1] | string }}
{{ {'b': 1, 'a': [1, 2.0, none, true, 'é"\\\\']} | tojson }} {{ {'x': {'y': []}} | tojson(indent=2) }} {{ [1, 2] | tojson(separators=(',', ':')) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}
{% for k, v in {'one': 1, 'two': 2}.items() %}{{ k }}={{ v }};{% endfor %} {% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %} {% for c in 'héllo' %}{{ c }}.{% endfor %} {% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 10, 4) %}{{ i }}{% endfor %}
{{ {'a': 1}.keys() | list }} {{ {'a': 1}.values() | list }} {{ {'a': 1} | items | list }} {{ dict(x=1, y='z') }}
{%- if false %}
never
{%- elif messages | length > 100 %}
never either
{%- else %}
 else-branch
{%- endif %}
{% set block %}inside a {{ 'set' }} block{% endset %}{{ block | upper }}
{% filter upper %}filtered {{ 'text' }}{% endfilter %}
{% raw %}{{ not rendered }} {% if %}{% endraw %}
{{ 'indent me\\nsecond line' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, true, true) }}
    {% if true %}lstripped{% endif %}
    {{- ' var-stripped ' -}}
    {%+ if true %}kept indent{% endif %}
{# a comment #}
line after comment
{{ 'nested ' ~ ('a' if true else 'b') ~ (none if false) ~ 1 ~ [2] }}
{{ (1, 2)[1] }} {{ [[1, 2], [3]][0][1] }} {{ messages[0].content[:5] }} {{ 'x'.0 if false else 'dot-int skipped' }}
{% if add_generation_prompt %}<assistant>{% endif %}
"""

LOOPCONTROLS = """{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}
{% for m in messages %}{% if m.role == 'assistant' %}{% break %}{% endif %}{{ m.role }} {% endfor %}"""


# name in templates.json -> file in llama.cpp's models/templates.
FAMILY_TEMPLATES = {
    "qwen3.5": "Qwen3.5-4B.jinja",
    "lfm2.5": "LFM2.5-Instruct.jinja",
    "lfm2": "LFM2-8B-A1B.jinja",
    "lfm2.5-moe": "LFM2.5-8B-A1B.jinja",
    "granite-4.0": "ibm-granite-granite-4.0.jinja",
}
LLAMA_CPP_COMMIT = "34af94cd9"


def family_templates():
    git = os.environ.get("LLAMA_CPP_GIT")
    if git:
        return {name: subprocess.run(["git", "--git-dir", git, "show",
                                      f"{LLAMA_CPP_COMMIT}:models/templates/{f}"],
                                     check=True, capture_output=True, text=True).stdout
                for name, f in FAMILY_TEMPLATES.items()}
    with open(os.path.join(HERE, "chat_templates", "templates.json")) as f:
        kept = json.load(f)
    return {name: kept[name] for name in FAMILY_TEMPLATES}


SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "Hi there! What's 2+2?"}
ASSISTANT = {"role": "assistant", "content": "  4.  \n"}
USER2 = {"role": "user", "content": "Thanks — and in French?  \n\n"}
UNICODE = {"role": "user", "content": "caf\u00e9 \u65e5\u672c\u8a9e \U0001f999 \"quotes\" 'single' \\back\\ {{ not a tag }}"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}, "days": {"type": "integer"}},
                                               "required": ["city"]}}}]
TOOL_CALL = {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                              "arguments": {"city": "Paris", "days": 2,
                                                                            "celsius": True, "ratio": 1.5}}}]}
TOOL_RESULT = {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21}"}

CONVERSATIONS = {
    "system_user": [SYSTEM, USER],
    "user_only": [USER],
    "multi_turn": [USER, ASSISTANT, USER2],
    "system_multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
    "unicode": [UNICODE],
    "tools": [SYSTEM, USER, TOOL_CALL, TOOL_RESULT, TOOL_RESULT],
    "named": [dict(USER, name="ada"), ASSISTANT],
    "bad_alternation": [USER, USER2],
    "empty": [],
}

REASONED = {"role": "assistant", "content": "4.", "reasoning_content": "\n2+2 is 4.\n"}
THOUGHT_INLINE = {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n  4, of course.  "}
TWO_CALLS = {"role": "assistant", "content": "Let me check both.\n",
             "tool_calls": [
                 {"type": "function", "function": {"name": "get_weather",
                                                   "arguments": {"city": "Paris", "days": 2}}},
                 {"type": "function", "function": {"name": "search",
                                                   "arguments": {"query": "caf\u00e9 \"best\"",
                                                                 "filters": {"open": True, "tags": ["a", 1]},
                                                                 "limit": None, "ids": [3, 4.5]}}}]}
TOOL_RESULT2 = {"role": "tool", "name": "search", "content": "[\"Caf\u00e9 A\"]"}
ANSWER = {"role": "assistant", "content": "It is 21 degrees. Caf\u00e9 A is open."}
PARTS = {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "image"},
                                     {"type": "text", "text": " and "}, {"type": "video"}]}
SYSTEM_PARTS = {"role": "system", "content": [{"type": "text", "text": "  Be brief.  "}]}
TOOLS2 = TOOLS + [{"type": "function", "function": {"name": "search", "description": "Search the web",
                                                    "parameters": {"type": "object", "properties": {
                                                        "query": {"type": "string"}}}}}]

# The hybrid families' templates get these besides CONVERSATIONS.
FAMILY_CONVERSATIONS = {
    "reasoning": [SYSTEM, USER, REASONED, USER2],
    "reasoning_last": [USER, REASONED],
    "think_inline": [USER, THOUGHT_INLINE, USER2, THOUGHT_INLINE],
    "two_calls": [SYSTEM, USER, TWO_CALLS, TOOL_RESULT, TOOL_RESULT2, ANSWER],
    "tool_last": [USER, TWO_CALLS, TOOL_RESULT, TOOL_RESULT2],
    "content_parts": [SYSTEM_PARTS, PARTS],
    "system_late": [USER, SYSTEM],
    "tool_only": [TOOL_RESULT],
}
DOCUMENTS = [{"doc_id": 1, "title": "Paris weather", "text": "Sunny, 21 \u00b0C \"today\"."},
             {"doc_id": 2, "title": "Caf\u00e9s", "text": "Caf\u00e9 A opens at 8.\nCaf\u00e9 B is shut."}]
# Conversations of one family's template alone, and the documents they pass.
TEMPLATE_CONVERSATIONS = {
    "granite-4.0": {"documents": [USER], "documents_tools": [SYSTEM, USER]},
}
TEMPLATE_DOCUMENTS = {"documents": DOCUMENTS, "documents_tools": DOCUMENTS}
FAMILY_TOOLS = {"tools": TOOLS, "two_calls": TOOLS2, "tool_last": TOOLS2, "documents_tools": TOOLS}
# Template variables each family's template reads beside transformers' own.
FAMILY_OPTIONS = {
    "qwen3.5": [{}, {"enable_thinking": True}, {"enable_thinking": False}],
    "lfm2.5": [{}, {"keep_past_thinking": True}],
    "granite-4.0": [{}, {"available_tools": TOOLS2}],
}


def render(source, variables):
    """apply_chat_template's text: transformers' render_jinja_template."""
    v = dict(variables)
    messages = v.pop("messages")
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=source, **v)
    return rendered[0]


def main():
    templates = {"llama3": LLAMA3, "inst": INST, "qwen2.5": QWEN, "gemma": GEMMA, "phi3": PHI3,
                 "kitchen_sink": KITCHEN_SINK, "loopcontrols": LOOPCONTROLS}
    if os.path.exists(SMOLLM2):
        r = gguf.GGUFReader(SMOLLM2)
        templates["smollm2"] = r.fields["tokenizer.chat_template"].contents()
    else:
        raise SystemExit(f"run tools/setup.sh first: {SMOLLM2} holds SmolLM2's template")
    templates.update(family_templates())
    cases = []
    for name, source in templates.items():
        family = name in FAMILY_TEMPLATES
        conversations = dict(CONVERSATIONS, **(FAMILY_CONVERSATIONS if family else {}),
                             **TEMPLATE_CONVERSATIONS.get(name, {}))
        for conv_name, messages in conversations.items():
            if conv_name == "empty" and name not in ("kitchen_sink", "phi3", "loopcontrols", "qwen3.5"):
                continue  # the family templates index messages[0]
            tools = FAMILY_TOOLS.get(conv_name) if family else TOOLS if conv_name == "tools" else None
            for agp in (True, False):
                for options in FAMILY_OPTIONS.get(name, [{}]) if agp else [{}]:
                    # The messages as the template sees them.
                    variables = {"messages": _alias_reasoning_fields(messages), "add_generation_prompt": agp,
                                 "bos_token": "<s>", "eos_token": "</s>",
                                 "tools": tools, "documents": TEMPLATE_DOCUMENTS.get(conv_name), **options}
                    case = {"template": name, "conversation": conv_name, "variables": variables}
                    try:
                        case["output"] = render(source, variables)
                    except (jinja2.exceptions.TemplateError, TypeError) as e:
                        case["error"] = str(e)  # raise_exception's, or a type error
                    cases.append(case)
    out = os.path.join(HERE, "chat_templates")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "templates.json"), "w") as f:
        json.dump(templates, f, indent=1, ensure_ascii=False)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1, ensure_ascii=False)
    print(len(cases), "cases,", sum("error" in c for c in cases), "of them errors")


if __name__ == "__main__":
    main()
