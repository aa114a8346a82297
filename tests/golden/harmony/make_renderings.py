#!/usr/bin/env python3
"""Reference renderings of gpt-oss "harmony" prompts.

Produces renderings.json: for each conversation,
  * harmony: openai-harmony 0.0.8's render_conversation_for_completion(conv, Role.ASSISTANT)
    token ids + decoded text (+ the Conversation as harmony JSON);
  * jinja: the gpt-oss chat template (files/chat_template.jinja, = trl 1.16.0's
    "original GPT-OSS chat template") rendered through transformers 5.23
    apply_chat_template(add_generation_prompt=True) on equivalent OpenAI-style
    messages, its text, and its token ids from (i) the derived HF tokenizer
    (files/derived_hf_tokenizer) and (ii) harmony's own encoder
    (encode(text, allowed_special="all"));
  * comparison: whether text / tokens match, and the first difference.

Run offline:
  /work/venvs/harmony/bin/python make_fixtures.py
(TIKTOKEN_ENCODINGS_BASE defaults to ./files, which holds o200k_base.tiktoken.)
"""
import copy
import datetime as _dt
import difflib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("TIKTOKEN_ENCODINGS_BASE", os.path.join(HERE, "files"))

from openai_harmony import (  # noqa: E402
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncodingName,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
    ToolDescription,
    load_harmony_encoding,
)

FIXED_DATE = "2025-08-05"  # the jinja template prints strftime_now("%Y-%m-%d"); we pin "now"

enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)

# ---------------------------------------------------------------- jinja side
TEMPLATE_PATH = os.path.join(HERE, "files", "chat_template.jinja")
HF_TOK_DIR = os.path.join(HERE, "files", "derived_hf_tokenizer")


def _load_hf_tokenizer():
    import transformers.utils.chat_template_utils as ctu
    from transformers import PreTrainedTokenizerFast

    class _FixedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            y, m, d = map(int, FIXED_DATE.split("-"))
            return cls(y, m, d, 12, 0, 0)

    ctu.datetime = _FixedDatetime  # strftime_now() looks `datetime` up at call time

    if not os.path.exists(os.path.join(HF_TOK_DIR, "tokenizer.json")):
        sys.path.insert(0, HERE)
        import build_hf_tokenizer

        build_hf_tokenizer.build(HF_TOK_DIR)
    with open(TEMPLATE_PATH, encoding="utf-8") as f:
        template = f.read()
    tok = PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(HF_TOK_DIR, "tokenizer.json"),
        bos_token="<|startoftext|>",
        eos_token="<|return|>",
        pad_token="<|endoftext|>",
    )
    tok.chat_template = template
    return tok


hf_tok = _load_hf_tokenizer() if os.path.exists(TEMPLATE_PATH) else None


def render_jinja(messages, tools=None, **kwargs):
    text = hf_tok.apply_chat_template(
        copy.deepcopy(messages), tools=tools, add_generation_prompt=True, tokenize=False, **kwargs
    )
    ids = hf_tok.apply_chat_template(
        copy.deepcopy(messages), tools=tools, add_generation_prompt=True, tokenize=True, **kwargs
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = list(ids)
    return text, ids


# ---------------------------------------------------------------- helpers
def sys_msg(effort=None, date=None, cutoff="default", identity="default", browser=False):
    sc = SystemContent.new()
    if effort is not None:
        sc = sc.with_reasoning_effort(effort)
    if date is not None:
        sc = sc.with_conversation_start_date(date)
    if cutoff != "default":
        sc = sc.with_knowledge_cutoff(cutoff)
    if identity != "default":
        sc = sc.with_model_identity(identity)
    if browser:
        sc = sc.with_browser_tool()
    return Message.from_role_and_content(Role.SYSTEM, sc)


def dev_msg(instructions=None, tools=None):
    dc = DeveloperContent.new()
    if instructions is not None:
        dc = dc.with_instructions(instructions)
    if tools:
        dc = dc.with_function_tools(
            [ToolDescription.new(t["name"], t["description"], parameters=t.get("parameters")) for t in tools]
        )
    return Message.from_role_and_content(Role.DEVELOPER, dc)


def user(text):
    return Message.from_role_and_content(Role.USER, text)


def analysis(text):
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("analysis")


def final(text):
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final")


def preamble(text):
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("commentary")


def tool_call(name, args):
    return (
        Message.from_role_and_content(Role.ASSISTANT, json.dumps(args))
        .with_channel("commentary")
        .with_recipient(f"functions.{name}")
        .with_content_type("<|constrain|>json")
    )


def tool_result(name, text):
    return (
        Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"), text)
        .with_recipient("assistant")
        .with_channel("commentary")
    )


def oai_tools(tools):
    return [
        {"type": "function", "function": {k: v for k, v in t.items() if k in ("name", "description", "parameters")}}
        for t in tools
    ]


# ---------------------------------------------------------------- tools
WEATHER = {
    "name": "get_current_weather",
    "description": "Gets the current weather in the provided location.",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        },
        "required": ["location"],
    },
}
SEARCH = {
    "name": "search_products",
    "description": "Search the product catalogue.",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Free-text query"},
            "max_price": {"type": "number", "description": "Upper price bound in USD"},
            "limit": {"type": "integer", "description": "Max results", "default": 10},
            "in_stock": {"type": "boolean", "default": True},
            "sort": {
                "type": "string",
                "enum": ["relevance", "price_asc", "price_desc"],
                "description": "Sort order",
            },
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags to match"},
            "scores": {"type": "array", "items": {"type": "number"}},
            "near": {
                "type": "object",
                "description": "A geographic point",
                "properties": {
                    "lat": {"type": "number", "description": "Latitude"},
                    "lon": {"type": "number"},
                    "radius_km": {"type": "number", "default": 5},
                },
                "required": ["lat", "lon"],
            },
            "filters": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"field": {"type": "string"}, "value": {"type": "string"}},
                    "required": ["field"],
                },
            },
        },
        "required": ["query"],
    },
}
NOARGS = {"name": "get_time", "description": "Returns the current time."}
EMPTY_OBJ = {
    "name": "ping",
    "description": "Health check.",
    "parameters": {"type": "object", "properties": {}},
}
# schema shapes where the two renderers are known to diverge (documented, not necessarily used by clients)
ADVANCED = {
    "name": "update_record",
    "description": "Update a record.\nSecond line of the description.",
    "parameters": {
        "type": "object",
        "properties": {
            "id": {"type": ["string", "integer"], "description": "Record id"},
            "note": {"type": "string", "nullable": True},
            "payload": {
                "oneOf": [{"type": "string", "description": "raw"}, {"type": "number"}],
                "description": "The payload",
            },
            "meta": {"type": "object"},
            "anything": {},
            "items": {"type": "array"},
        },
        "required": ["id", "payload"],
    },
}

# ---------------------------------------------------------------- cases
WEATHER_ARGS = {"location": "San Francisco, CA", "format": "celsius"}
WEATHER_RESULT = '{"temperature": 20, "sunny": true}'

CASES = []


def case(name, description, harmony_msgs, oai_msgs, tools=None, **jinja_kwargs):
    CASES.append(
        dict(
            name=name,
            description=description,
            harmony_msgs=harmony_msgs,
            oai_msgs=oai_msgs,
            tools=tools,
            jinja_kwargs=jinja_kwargs,
        )
    )


case(
    "a_user_only_default_system",
    "Default SystemContent.new() (no date) + one user message. The jinja template always prints 'Current date:'.",
    [sys_msg(), user("What is 2 + 2?")],
    [{"role": "user", "content": "What is 2 + 2?"}],
)
case(
    "a2_user_only_default_system_with_date",
    "Default system + conversation_start_date (what the jinja template always renders) + one user message.",
    [sys_msg(date=FIXED_DATE), user("What is 2 + 2?")],
    [{"role": "user", "content": "What is 2 + 2?"}],
)
for eff, name in ((ReasoningEffort.LOW, "low"), (ReasoningEffort.MEDIUM, "medium"), (ReasoningEffort.HIGH, "high")):
    case(
        f"b_reasoning_{name}",
        f"System message with reasoning_effort={name} (and the pinned current date).",
        [sys_msg(effort=eff, date=FIXED_DATE), user("Explain BPE in one sentence.")],
        [{"role": "user", "content": "Explain BPE in one sentence."}],
        reasoning_effort=name,
    )
case(
    "c_developer_instructions",
    "Developer instructions (jinja: a leading 'developer' or 'system' message) + user.",
    [
        sys_msg(date=FIXED_DATE),
        dev_msg(instructions="Always respond in riddles."),
        user("What is the weather like in SF?"),
    ],
    [
        {"role": "developer", "content": "Always respond in riddles."},
        {"role": "user", "content": "What is the weather like in SF?"},
    ],
)
case(
    "c2_system_role_as_instructions",
    "OpenAI 'system' role message: jinja maps it to developer '# Instructions' too.",
    [
        sys_msg(date=FIXED_DATE),
        dev_msg(instructions="You are a terse assistant."),
        user("Hi"),
    ],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Hi"}],
)
case(
    "d_tools_basic",
    "Function tools (string, enum+default, required/optional) without instructions.",
    [sys_msg(date=FIXED_DATE), dev_msg(tools=[WEATHER]), user("What is the weather in Tokyo?")],
    [{"role": "user", "content": "What is the weather in Tokyo?"}],
    tools=[WEATHER],
)
case(
    "d2_tools_rich_schema",
    "Instructions + tools: number, integer, boolean, enum, defaults, optional, nested object, arrays of "
    "scalars/objects, no-parameter and empty-object tools.",
    [
        sys_msg(date=FIXED_DATE),
        dev_msg(instructions="Be helpful.", tools=[WEATHER, SEARCH, NOARGS, EMPTY_OBJ]),
        user("Find me cheap red shoes near Paris."),
    ],
    [{"role": "developer", "content": "Be helpful."}, {"role": "user", "content": "Find me cheap red shoes near Paris."}],
    tools=[WEATHER, SEARCH, NOARGS, EMPTY_OBJ],
)
case(
    "d3_tools_advanced_schema",
    "Schema shapes where renderers diverge: type arrays, nullable, oneOf, bare object, untyped, array without items, "
    "multi-line description.",
    [sys_msg(date=FIXED_DATE), dev_msg(tools=[ADVANCED]), user("Update record 7.")],
    [{"role": "user", "content": "Update record 7."}],
    tools=[ADVANCED],
)
case(
    "e_multiturn_analysis_dropped",
    "Earlier assistant turn had analysis + final; next turn prompt. Harmony drops analysis before the first final "
    "(auto_drop_analysis, default).",
    [
        sys_msg(date=FIXED_DATE),
        user("What is 2 + 2?"),
        analysis("User asks a simple sum. Answer 4."),
        final("2 + 2 = 4."),
        user("And times 3?"),
    ],
    [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "thinking": "User asks a simple sum. Answer 4.", "content": "2 + 2 = 4."},
        {"role": "user", "content": "And times 3?"},
    ],
)
case(
    "e2_multiturn_two_turns_analysis",
    "Two earlier assistant turns, each analysis + final. Harmony only drops analysis messages BEFORE THE FIRST final "
    "of the conversation, so the second turn's analysis is kept; the jinja template drops all of them.",
    [
        sys_msg(date=FIXED_DATE),
        user("What is 2 + 2?"),
        analysis("Simple sum."),
        final("4"),
        user("And times 3?"),
        analysis("4 * 3 = 12."),
        final("12"),
        user("Thanks!"),
    ],
    [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "thinking": "Simple sum.", "content": "4"},
        {"role": "user", "content": "And times 3?"},
        {"role": "assistant", "thinking": "4 * 3 = 12.", "content": "12"},
        {"role": "user", "content": "Thanks!"},
    ],
)
case(
    "f_tool_call_then_result",
    "Assistant analysis + tool call (commentary, to=functions.x, <|constrain|>json), tool result, then prompt for the "
    "next assistant message. Analysis is kept (no final after it).",
    [
        sys_msg(date=FIXED_DATE),
        dev_msg(tools=[WEATHER]),
        user("What is the weather in SF?"),
        analysis("Need to use function get_current_weather."),
        tool_call("get_current_weather", WEATHER_ARGS),
        tool_result("get_current_weather", WEATHER_RESULT),
    ],
    [
        {"role": "user", "content": "What is the weather in SF?"},
        {
            "role": "assistant",
            "thinking": "Need to use function get_current_weather.",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_current_weather", "arguments": WEATHER_ARGS}}
            ],
        },
        {"role": "tool", "content": WEATHER_RESULT},
    ],
    tools=[WEATHER],
)
case(
    "f2_tool_call_result_final_then_user",
    "Tool call round trip followed by the assistant's final answer and a new user turn: analysis before the first "
    "final is dropped; the tool call and result stay.",
    [
        sys_msg(date=FIXED_DATE),
        dev_msg(tools=[WEATHER]),
        user("What is the weather in SF?"),
        analysis("Need to use function get_current_weather."),
        tool_call("get_current_weather", WEATHER_ARGS),
        tool_result("get_current_weather", WEATHER_RESULT),
        analysis("It is sunny and 20C."),
        final("It is sunny and 20°C in San Francisco."),
        user("Great, thanks."),
    ],
    [
        {"role": "user", "content": "What is the weather in SF?"},
        {
            "role": "assistant",
            "thinking": "Need to use function get_current_weather.",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_current_weather", "arguments": WEATHER_ARGS}}
            ],
        },
        {"role": "tool", "content": WEATHER_RESULT},
        {"role": "assistant", "thinking": "It is sunny and 20C.", "content": "It is sunny and 20°C in San Francisco."},
        {"role": "user", "content": "Great, thanks."},
    ],
    tools=[WEATHER],
)
case(
    "f3_preamble_then_tool_call",
    "A commentary preamble (no recipient) before the tool call, then the tool result. Harmony renders it; the jinja "
    "template has no way to express a preamble (content of a tool_calls message becomes analysis).",
    [
        sys_msg(date=FIXED_DATE),
        dev_msg(tools=[WEATHER]),
        user("What is the weather in SF?"),
        preamble("Let me check the weather for you."),
        tool_call("get_current_weather", WEATHER_ARGS),
        tool_result("get_current_weather", WEATHER_RESULT),
    ],
    [
        {"role": "user", "content": "What is the weather in SF?"},
        {
            "role": "assistant",
            "content": "Let me check the weather for you.",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_current_weather", "arguments": WEATHER_ARGS}}
            ],
        },
        {"role": "tool", "content": WEATHER_RESULT},
    ],
    tools=[WEATHER],
)
case(
    "g_date_and_cutoff",
    "Builtin-free conversation with explicit model identity, knowledge cutoff 2024-06, current date, "
    "reasoning high, developer instructions.",
    [
        sys_msg(effort=ReasoningEffort.HIGH, date=FIXED_DATE, cutoff="2024-06",
                identity="You are ChatGPT, a large language model trained by OpenAI."),
        dev_msg(instructions="Answer concisely."),
        user("Who are you?"),
    ],
    [{"role": "developer", "content": "Answer concisely."}, {"role": "user", "content": "Who are you?"}],
    reasoning_effort="high",
    model_identity="You are ChatGPT, a large language model trained by OpenAI.",
)
case(
    "h_browser_builtin",
    "Extra: system message with the builtin browser tool namespace (jinja builtin_tools=['browser']).",
    [sys_msg(date=FIXED_DATE, browser=True), user("Search for harmony format.")],
    [{"role": "user", "content": "Search for harmony format."}],
    builtin_tools=["browser"],
)
case(
    "i_unicode_and_specials_in_text",
    "Non-ASCII user text; special-token look-alikes in plain text are encoded as ordinary text by harmony.",
    [sys_msg(date=FIXED_DATE), user("Café naïve 日本語 🚀 — what does <|end|> mean?")],
    [{"role": "user", "content": "Café naïve 日本語 🚀 — what does <|end|> mean?"}],
)


# ---------------------------------------------------------------- run
def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run():
    out = {
        "generator": "make_fixtures.py",
        "openai_harmony_version": "0.0.8",
        "encoding": enc.name,
        "vocab_file_sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "chat_template": "files/chat_template.jinja (trl 1.16.0 trl/chat_templates/gptoss.jinja)" if hf_tok else None,
        "jinja_fixed_current_date": FIXED_DATE,
        "stop_tokens": sorted(enc.stop_tokens()),
        "stop_tokens_for_assistant_actions": sorted(enc.stop_tokens_for_assistant_actions()),
        "cases": [],
    }
    for c in CASES:
        conv = Conversation.from_messages(c["harmony_msgs"])
        toks = enc.render_conversation_for_completion(conv, Role.ASSISTANT)
        text = enc.decode_utf8(toks)
        reenc = enc.encode(text, allowed_special="all")
        entry = {
            "name": c["name"],
            "description": c["description"],
            "harmony": {
                "conversation": json.loads(conv.to_json()),
                "next_turn_role": "assistant",
                "tokens": toks,
                "text": text,
                "num_tokens": len(toks),
                "piecewise_equals_whole_text_encoding": reenc == toks,
            },
        }
        if hf_tok is not None:
            try:
                jtext, jids = render_jinja(c["oai_msgs"], tools=oai_tools(c["tools"]) if c["tools"] else None,
                                           **c["jinja_kwargs"])
                jids_harmony = enc.encode(jtext, allowed_special="all")
                fd_text = first_diff(text, jtext)
                fd_tok = first_diff(toks, jids_harmony)
                diff = list(
                    difflib.unified_diff(
                        text.splitlines(keepends=True), jtext.splitlines(keepends=True),
                        fromfile="harmony", tofile="jinja", n=1,
                    )
                )
                entry["jinja"] = {
                    "messages": c["oai_msgs"],
                    "tools": oai_tools(c["tools"]) if c["tools"] else None,
                    "template_kwargs": c["jinja_kwargs"],
                    "add_generation_prompt": True,
                    "text": jtext,
                    "tokens": jids_harmony,
                    "tokens_hf_tokenizer": jids,
                    "hf_tokenizer_agrees_with_harmony_encoder": jids == jids_harmony,
                }
                entry["comparison"] = {
                    "text_equal": text == jtext,
                    "tokens_equal": toks == jids_harmony,
                    "first_text_diff_index": fd_text,
                    "first_text_diff_context": None
                    if fd_text is None
                    else {"harmony": text[max(0, fd_text - 40): fd_text + 60],
                          "jinja": jtext[max(0, fd_text - 40): fd_text + 60]},
                    "first_token_diff_index": fd_tok,
                    "unified_diff": "".join(diff),
                }
            except Exception as e:  # keep going; record the template error
                entry["jinja"] = {"messages": c["oai_msgs"], "error": f"{type(e).__name__}: {e}"}
        out["cases"].append(entry)
    path = os.path.join(HERE, "renderings.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    for e in out["cases"]:
        cmp = e.get("comparison")
        print(
            f"{e['name']:40s} harmony={e['harmony']['num_tokens']:5d} toks  "
            + ("jinja: n/a" if not cmp else f"text_equal={cmp['text_equal']} tokens_equal={cmp['tokens_equal']}")
            + ("" if "error" not in e.get("jinja", {}) else f"  JINJA ERROR {e['jinja']['error']}")
        )
    print("wrote", path)


if __name__ == "__main__":
    run()
