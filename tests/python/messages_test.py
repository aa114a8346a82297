#!/usr/bin/env python3
"""Anthropic's Messages API (/v1/messages) of the real flover_server on
loopback, driven by the official `anthropic` package, on the real
SmolLM2-135M-Instruct GGUF file: a plain reply (the same text as the same
conversation through /v1/chat/completions), streamed (the same text, in
Anthropic's event sequence), a tool round trip (tool_use -> tool_result ->
answer) with forced and `any` tool choice, streamed tool input as
input_json_delta, thinking blocks from a thinking-shaped template,
count_tokens, and refusals in Anthropic's error shape naming the field."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_test  # noqa: E402
from openai_test import CHAT_MODEL, Server  # noqa: E402

import anthropic  # noqa: E402
import pydantic  # noqa: E402

MODEL = "SmolLM2-135M-Instruct.Q4_1"
ASK = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": False}}


class City(pydantic.BaseModel):
    name: str
    country: str


def client(s):
    return anthropic.Anthropic(base_url=s.base_url[:-len("/v1")], api_key="unused", max_retries=0)


class MessagesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=1024", "--threads=2")
        cls.c = client(cls.s)

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def test_plain_and_streamed_equal_chat_completions(self):
        m = plain = self.c.messages.create(model=MODEL, max_tokens=24, messages=ASK, extra_body={"temperature": 0})
        self.assertEqual(m.type, "message")
        self.assertEqual(m.role, "assistant")
        self.assertEqual([b.type for b in m.content], ["text"])
        self.assertIn(m.stop_reason, ("end_turn", "max_tokens"))
        chat = self.s.openai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=24, temperature=0)
        self.assertEqual(m.content[0].text, chat.choices[0].message.content)
        self.assertEqual(m.usage.input_tokens, chat.usage.prompt_tokens)
        self.assertEqual(m.usage.output_tokens, chat.usage.completion_tokens)
        # A system prompt, streamed and whole (temperature, top_p and top_k are
        # no longer the SDK's arguments: older clients' fields, read as sent).
        kw = dict(model=MODEL, max_tokens=24, messages=ASK, system="Answer briefly.", extra_body={"temperature": 0})
        m = self.c.messages.create(**kw)
        events = []
        with self.c.messages.stream(**kw) as stream:
            for e in stream:
                events.append(e.type)
            final = stream.get_final_message()
        self.assertEqual(final.content[0].text, m.content[0].text)
        self.assertEqual(final.stop_reason, m.stop_reason)
        self.assertEqual(final.usage.output_tokens, m.usage.output_tokens)
        self.assertEqual(events[0], "message_start")
        self.assertIn("content_block_start", events)
        self.assertEqual(events[-1], "message_stop")
        # A stop sequence ends it.
        s = self.c.messages.create(model=MODEL, max_tokens=24, messages=ASK, extra_body={"temperature": 0},
                                   stop_sequences=[plain.content[0].text.split()[1]])
        self.assertEqual(s.stop_reason, "stop_sequence")
        self.assertEqual(s.stop_sequence, plain.content[0].text.split()[1])
        # count_tokens counts what a reply's usage says.
        n = self.c.messages.count_tokens(model=MODEL, messages=ASK, system="Answer briefly.")
        self.assertEqual(n.input_tokens, m.usage.input_tokens)

    def test_tool_round_trip(self):
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        # any: one call or several (parallel calls allowed); a named tool: one.
        for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
            m = self.c.messages.create(model=MODEL, max_tokens=64, messages=ask, tools=[WEATHER],
                                       tool_choice=choice, extra_body={"temperature": 0})
            self.assertEqual(m.stop_reason, "tool_use", m)
            uses = [b for b in m.content if b.type == "tool_use"]
            self.assertGreaterEqual(len(uses), 1, m)
            for u in uses:
                self.assertEqual(u.name, "get_weather")
                self.assertIsInstance(u.input["city"], str)
        self.assertEqual(len(uses), 1, m)
        # Streamed: the input arrives as input_json_delta, the same input.
        with self.c.messages.stream(model=MODEL, max_tokens=64, messages=ask, tools=[WEATHER],
                                    tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0}) as stream:
            kinds = [e.type for e in stream]
            streamed = stream.get_final_message()
        self.assertIn("input_json", kinds)
        self.assertEqual([b.input for b in streamed.content if b.type == "tool_use"], [uses[0].input])
        # The result back, and an answer without tools.
        follow = [*ask, {"role": "assistant", "content": m.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                "content": "Sunny, 21 C"}]}]
        a = self.c.messages.create(model=MODEL, max_tokens=24, messages=follow, tools=[WEATHER],
                                   tool_choice={"type": "none"}, extra_body={"temperature": 0})
        self.assertEqual([b.type for b in a.content], ["text"])
        self.assertIn(a.stop_reason, ("end_turn", "max_tokens"))
        # A result that answers no call is refused, naming it.
        bad = [*ask, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}]
        with self.assertRaises(anthropic.BadRequestError) as e:
            self.c.messages.create(model=MODEL, max_tokens=8, messages=bad)
        self.assertIn("messages[1].content[0].tool_use_id", str(e.exception))
        self.assertEqual(e.exception.body["error"]["type"], "invalid_request_error")

    def test_structured_output_with_a_pydantic_model(self):
        # output_config.format, as messages.parse sends it.
        r = self.c.messages.parse(model=MODEL, max_tokens=64, output_format=City,
                                  messages=[{"role": "user", "content": "Name a city in France as JSON."}],
                                  extra_body={"temperature": 0})
        self.assertIsInstance(r.parsed_output, City)

    def test_refusals_in_anthropics_shape(self):
        cases = [({"messages": ASK}, "max_tokens"),
                 ({"max_tokens": 8, "messages": []}, "messages"),
                 ({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
                 ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
                  "messages[0].content[0].source.type"),
                 ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
                  "messages[0].content[0].type"),
                 ({"max_tokens": 8, "messages": ASK, "tools": [{"name": "x"}]}, "tools[0].input_schema"),
                 ({"max_tokens": 8, "messages": ASK, "tool_choice": {"type": "maybe"}}, "tool_choice.type"),
                 ({"max_tokens": 8, "messages": ASK, "thinking": {"type": "sometimes"}}, "thinking.type"),
                 ({"max_tokens": 8, "messages": ASK, "output_config": {"format": {"type": "xml"}}},
                  "output_config.format.type")]
        for body, field in cases:
            status, reply = self.s.post("/v1/messages", {"model": MODEL, **body})
            self.assertEqual(status, 400, (body, reply))
            self.assertEqual(reply["type"], "error")
            self.assertEqual(reply["error"]["type"], "invalid_request_error")
            self.assertIn(field, reply["error"]["message"])
        with self.assertRaises(anthropic.NotFoundError):
            self.c.messages.create(model="claude-x", max_tokens=8, messages=ASK)


class ThinkingTest(unittest.TestCase):
    def test_thinking_blocks(self):
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=512", "--threads=2",
                   "--chat_template=chat/templates/chatml_think.jinja")
        try:
            c = client(s)
            # SmolLM2 never closes the thinking the template opened: all of it is thinking.
            m = c.messages.create(model=MODEL, max_tokens=16, messages=ASK, extra_body={"temperature": 0})
            thinking = [b for b in m.content if b.type == "thinking"]
            self.assertEqual(len(thinking), 1, m)
            chat = s.openai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=16, temperature=0)
            self.assertEqual(thinking[0].thinking, chat.choices[0].message.model_dump()["reasoning_content"])
            with c.messages.stream(model=MODEL, max_tokens=16, messages=ASK, extra_body={"temperature": 0}) as stream:
                final = stream.get_final_message()
            self.assertEqual([b.thinking for b in final.content if b.type == "thinking"], [thinking[0].thinking])
            # thinking disabled: the template closes it in the prompt, no thinking block.
            off = c.messages.create(model=MODEL, max_tokens=16, messages=ASK, extra_body={"temperature": 0},
                                    thinking={"type": "disabled"})
            self.assertEqual([b.type for b in off.content], ["text"])
        finally:
            s.close()


if __name__ == "__main__":
    openai_test.SERVER = sys.argv[1]
    openai_test.LOADGEN = sys.argv[2]
    sys.argv = sys.argv[:1]
    unittest.main()
