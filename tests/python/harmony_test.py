#!/usr/bin/env python3
"""gpt-oss's harmony replies through the real flover_server on loopback,
driven by the official `openai` package. SmolLM2-135M-Instruct serves with
gpt-oss's own chat template (tests/golden/harmony/renderings.json: trl's copy
of the original) and --reasoning_parser=harmony; a regex holds its replies
to harmony's shape (SmolLM2 spells the channel tokens as text; the reader
reads text), so these check the server's path: the analysis channel as
reasoning_content and the final one as content, a commentary call to
functions.* as tool_calls, the same streamed and whole; a named function
(or required with one tool) opened by the server and its arguments held by
the schema; reasoning_effort in the system message; and what harmony does
not take yet, refused by name."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_test  # noqa: E402
from openai_test import CHAT_MODEL, Server  # noqa: E402

import openai  # noqa: E402

MODEL = "SmolLM2-135M-Instruct.Q4_1"
ASK = [{"role": "user", "content": "What is two plus two?"}]
ANSWER = (r"<\|channel\|>analysis<\|message\|>[a-z]{1,8}( [a-z]{1,8}){2,5}<\|end\|>"
          r"<\|start\|>assistant<\|channel\|>final<\|message\|>[A-Z][a-z]{1,8}( [a-z]{1,8}){1,4}\.")
CALL = (r"<\|channel\|>analysis<\|message\|>[a-z]{1,8}( [a-z]{1,8}){1,3}<\|end\|>"
        r"<\|start\|>assistant<\|channel\|>commentary to=functions\.get_weather <\|constrain\|>json"
        r"<\|message\|>\{\"city\": \"[A-Z][a-z]{2,8}\"\}")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def whole_and_streamed(s, **kw):
    whole = s.openai.chat.completions.create(model=MODEL, **kw)
    reasoning, content, calls = "", "", {}
    for chunk in s.openai.chat.completions.create(model=MODEL, stream=True, **kw):
        for c in chunk.choices:
            delta = c.delta.model_dump()
            reasoning += delta.get("reasoning_content") or ""
            content += delta.get("content") or ""
            for t in delta.get("tool_calls") or []:
                call = calls.setdefault(t["index"], {"name": "", "arguments": ""})
                call["name"] += (t.get("function") or {}).get("name") or ""
                call["arguments"] += (t.get("function") or {}).get("arguments") or ""
    return whole.choices[0], reasoning, content, calls


def check_split(test, s, ask, answer):
    """A reply held to `answer` (a regex: a few lowercase words of reasoning,
    then a capitalised sentence), greedy and sampled: its reasoning and
    content as expected, the same streamed and whole."""
    for extra in ({"temperature": 0}, {"temperature": 0.9, "seed": 5}):
        choice, reasoning, content, _ = whole_and_streamed(
            s, messages=ask, max_tokens=120, extra_body={"guided_regex": answer}, **extra)
        got = choice.message.model_dump()
        test.assertRegex(got["reasoning_content"], r"^[a-z]+( [a-z]+)+$")
        test.assertRegex(choice.message.content, r"^[A-Z][a-z]+( [a-z]+)+\.$")
        test.assertEqual(reasoning, got["reasoning_content"], extra)
        test.assertEqual(content, choice.message.content, extra)


class HarmonyTest(unittest.TestCase):
    def test_channels_calls_and_refusals(self):
        with open("tests/golden/harmony/renderings.json") as f:
            template = json.load(f)["template"]
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write(template)
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=1024", "--threads=2", f"--chat_template={f.name}",
                   "--reasoning_parser=harmony")
        try:
            check_split(self, s, ASK, ANSWER)
            # A call on the commentary channel is a tool call, whole and streamed.
            choice, reasoning, content, calls = whole_and_streamed(
                s, messages=ASK, tools=TOOLS, max_tokens=120, temperature=0, extra_body={"guided_regex": CALL})
            self.assertEqual(choice.finish_reason, "tool_calls")
            self.assertEqual(len(choice.message.tool_calls), 1)
            call = choice.message.tool_calls[0]
            self.assertEqual(call.function.name, "get_weather")
            self.assertRegex(json.loads(call.function.arguments)["city"], r"^[A-Z][a-z]+$")
            self.assertTrue(choice.message.model_dump()["reasoning_content"])
            self.assertEqual(calls[0]["name"], "get_weather")
            self.assertEqual(json.loads(calls[0]["arguments"]), json.loads(call.function.arguments))
            self.assertFalse(content)
            # A named function (or required with one tool): the server opens
            # the call, its schema holds the arguments.
            for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
                choice_, _, content, calls = whole_and_streamed(
                    s, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=60, temperature=0)
                self.assertEqual(choice_.finish_reason, "tool_calls", choice)
                call = choice_.message.tool_calls[0]
                self.assertEqual(call.function.name, "get_weather")
                self.assertIsInstance(json.loads(call.function.arguments)["city"], str)
                self.assertEqual(json.loads(calls[0]["arguments"]), json.loads(call.function.arguments))
                self.assertFalse(content)
            # reasoning_effort reaches the system message.
            for effort in ("low", "high"):
                status, tokens = s.post("/tokenize", {"messages": ASK, "reasoning_effort": effort})
                self.assertEqual(status, 200, tokens)
                status, text = s.post("/detokenize", {"tokens": tokens["tokens"]})
                self.assertIn(f"Reasoning: {effort}", text["content"])
            # Not taken yet, said by name.
            two = TOOLS + [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
            for body, field in (({"tool_choice": "required", "tools": two}, "tool_choice"),
                                ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                                  "tools": TOOLS, "response_format": {"type": "json_object"}}, "tool_choice"),
                                ({"max_reasoning_tokens": 10}, "max_reasoning_tokens")):
                with self.assertRaises(openai.BadRequestError) as e:
                    s.openai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, extra_body=body)
                self.assertIn(field, str(e.exception))
        finally:
            s.close()
            os.unlink(f.name)


if __name__ == "__main__":
    openai_test.SERVER = sys.argv[1]
    openai_test.LOADGEN = sys.argv[2]
    sys.argv = sys.argv[:1]
    unittest.main()
