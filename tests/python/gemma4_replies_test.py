#!/usr/bin/env python3
"""Gemma 4's replies through the real flover_server on loopback, driven by the
official `openai` package. SmolLM2-135M-Instruct serves with Google's Gemma 4
chat template (tests/golden/gemma4_chat/chat_template.jinja), and the server
picks the reply formats from it (no flags): the thought channel
(<|channel>thought ... <channel|>) comes back as reasoning_content, and calls
in the template's own notation (<|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|>)
as tool_calls with JSON arguments, the same streamed and whole. SmolLM2 spells
Gemma's marker tokens as text; the reader reads text, so these check the
server's path: a regex holds the reasoning replies to Gemma's shape, and
tool_choice (named or required) is held by the grammar the server builds
from the function's schema in Gemma's notation."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_test  # noqa: E402
from harmony_test import MODEL, check_split, whole_and_streamed  # noqa: E402  (the same model and checks)
from openai_test import CHAT_MODEL, Server  # noqa: E402

import openai  # noqa: E402

ASK = [{"role": "user", "content": "What is two plus two?"}]
ANSWER = (r"<\|channel>thought\n[a-z]{1,8}( [a-z]{1,8}){2,5}\n<channel\|>"
          r"[A-Z][a-z]{1,8}( [a-z]{1,8}){1,4}\.")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]


class Gemma4RepliesTest(unittest.TestCase):
    def test_thought_channel_calls_and_refusals(self):
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=1024", "--threads=2",
                   "--chat_template=tests/golden/gemma4_chat/chat_template.jinja")
        try:
            check_split(self, s, ASK, ANSWER)
            # A named function, or required: the grammar holds the call in
            # Gemma's notation; the reply's calls are JSON.
            for tool_choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
                choice, _, content, calls = whole_and_streamed(
                    s, messages=ASK, tools=TOOLS, tool_choice=tool_choice, max_tokens=60, temperature=0,
                    parallel_tool_calls=False)
                self.assertEqual(choice.finish_reason, "tool_calls", (tool_choice, choice.message))
                call = choice.message.tool_calls[0]
                args = json.loads(call.function.arguments)
                if call.function.name == "get_weather":
                    self.assertIn(args["city"], ("Paris", "Oslo", "Lima"))
                    self.assertTrue(set(args) <= {"city", "days"})
                else:
                    self.assertEqual(call.function.name, "get_time")
                    self.assertEqual(args, {})
                self.assertEqual(calls[0]["name"], call.function.name)
                self.assertEqual(json.loads(calls[0]["arguments"]), args)
                self.assertFalse(content)
            # The call goes back to the template as the notation, its result after it.
            history = ASK + [
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "get_weather", "arguments": json.dumps({"days": 2, "city": "Oslo"})}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "21C"}]
            status, tokens = s.post("/tokenize", {"messages": history, "tools": TOOLS,
                                                  "chat_template_kwargs": {"enable_thinking": True}})
            self.assertEqual(status, 200, tokens)
            status, text = s.post("/detokenize", {"tokens": tokens["tokens"]})
            self.assertIn('<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:2}<tool_call|>'
                          '<|tool_response>response:get_weather{value:<|"|>21C<|"|>}<tool_response|>',
                          text["content"])
            self.assertIn("<|think|>", text["content"])
            # What the notation's grammar cannot hold is refused by name.
            pattern = [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z]+$"}}}}}]
            with self.assertRaises(openai.BadRequestError) as e:
                s.openai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, tools=pattern,
                                                 tool_choice="required")
            self.assertIn("pattern", str(e.exception))
            self.assertIn("tool_choice", str(e.exception))
        finally:
            s.close()


if __name__ == "__main__":
    openai_test.SERVER = sys.argv[1]
    openai_test.LOADGEN = sys.argv[2]
    sys.argv = sys.argv[:1]
    unittest.main()
