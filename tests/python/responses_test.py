#!/usr/bin/env python3
"""OpenAI's Responses API (/v1/responses) of the real flover_server on
loopback, driven by the official `openai` package, on the real
SmolLM2-135M-Instruct GGUF file: a plain reply (the same text as the same
conversation through /v1/chat/completions), streamed as its semantic events
(the same text), instructions, function calls and their outputs,
previous_response_id over the bounded store (retrieve, delete, eviction),
text.format through client.responses.parse with a pydantic model, and
refusals naming the field."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_test  # noqa: E402
from openai_test import CHAT_MODEL, Server  # noqa: E402

import openai  # noqa: E402
import pydantic  # noqa: E402

MODEL = "SmolLM2-135M-Instruct.Q4_1"
QUESTION = "What is the capital of France?"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False}}


class City(pydantic.BaseModel):
    name: str
    country: str


class ResponsesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=1024", "--threads=2", "--responses_store=2")
        cls.c = cls.s.openai

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def chat(self, messages, n=24):
        r = self.c.chat.completions.create(model=MODEL, messages=messages, max_tokens=n, temperature=0)
        return r.choices[0].message.content, r.usage

    def test_plain_streamed_and_instructions(self):
        r = self.c.responses.create(model=MODEL, input=QUESTION, max_output_tokens=24, temperature=0)
        self.assertEqual(r.object, "response")
        self.assertIn(r.status, ("completed", "incomplete"))
        text, usage = self.chat([{"role": "user", "content": QUESTION}])
        self.assertEqual(r.output_text, text)
        self.assertEqual(r.usage.input_tokens, usage.prompt_tokens)
        self.assertEqual(r.usage.output_tokens, usage.completion_tokens)
        kinds, final = [], None
        for e in self.c.responses.create(model=MODEL, input=QUESTION, max_output_tokens=24, temperature=0,
                                         stream=True):
            kinds.append(e.type)
            if e.type in ("response.completed", "response.incomplete"):
                final = e.response
        self.assertEqual(kinds[:2], ["response.created", "response.in_progress"])
        self.assertIn("response.output_text.delta", kinds)
        self.assertIn(kinds[-1], ("response.completed", "response.incomplete"))
        self.assertEqual(final.output_text, text)
        # instructions are the system message.
        r = self.c.responses.create(model=MODEL, input=QUESTION, instructions="Answer briefly.",
                                    max_output_tokens=24, temperature=0)
        self.assertEqual(r.output_text, self.chat([{"role": "system", "content": "Answer briefly."},
                                                   {"role": "user", "content": QUESTION}])[0])

    def test_function_calls_and_previous_response(self):
        ask = "What is the weather in Paris?"
        r = self.c.responses.create(model=MODEL, input=ask, tools=[WEATHER], max_output_tokens=64, temperature=0,
                                    tool_choice={"type": "function", "name": "get_weather"})
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertEqual(len(calls), 1, r.output)
        self.assertEqual(calls[0].name, "get_weather")
        self.assertIn('"city"', calls[0].arguments)
        # Streamed: the arguments as deltas, the same call.
        deltas, done = "", None
        for e in self.c.responses.create(model=MODEL, input=ask, tools=[WEATHER], max_output_tokens=64,
                                         temperature=0, tool_choice={"type": "function", "name": "get_weather"},
                                         stream=True):
            if e.type == "response.function_call_arguments.delta":
                deltas += e.delta
            if e.type == "response.function_call_arguments.done":
                done = e.arguments
        self.assertEqual(done, calls[0].arguments)
        self.assertTrue(deltas)
        # Its output, continuing the stored response.
        out = self.c.responses.create(model=MODEL, previous_response_id=r.id, tools=[WEATHER], temperature=0,
                                      input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                              "output": "Sunny, 21 C"}],
                                      max_output_tokens=24, tool_choice="none")
        self.assertEqual([o.type for o in out.output], ["message"])
        self.assertGreater(out.usage.input_tokens, r.usage.input_tokens)
        # The same conversation sent whole, without the store: the same answer.
        whole = self.c.responses.create(model=MODEL, tools=[WEATHER], temperature=0, max_output_tokens=24,
                                        tool_choice="none", store=False,
                                        input=[{"role": "user", "content": ask},
                                               {"type": "function_call", "call_id": calls[0].call_id,
                                                "name": "get_weather", "arguments": calls[0].arguments},
                                               {"type": "function_call_output", "call_id": calls[0].call_id,
                                                "output": "Sunny, 21 C"}])
        self.assertEqual(whole.output_text, out.output_text)
        # An output answering no call is refused, naming it.
        with self.assertRaises(openai.BadRequestError) as e:
            self.c.responses.create(model=MODEL, max_output_tokens=8,
                                    input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}])
        self.assertIn("input[0].call_id", str(e.exception))

    def test_store_retrieve_delete_evict(self):
        first = self.c.responses.create(model=MODEL, input=QUESTION, max_output_tokens=8, temperature=0)
        self.assertEqual(self.c.responses.retrieve(first.id).output_text, first.output_text)
        # Continued: the conversation so far, then the new turn.
        second = self.c.responses.create(model=MODEL, input="And of Germany?", previous_response_id=first.id,
                                         max_output_tokens=16, temperature=0)
        text, _ = self.chat([{"role": "user", "content": QUESTION},
                             {"role": "assistant", "content": first.output_text},
                             {"role": "user", "content": "And of Germany?"}], n=16)
        self.assertEqual(second.output_text, text)
        self.c.responses.delete(second.id)
        with self.assertRaises(openai.NotFoundError):
            self.c.responses.retrieve(second.id)
        # The store keeps 2 (--responses_store=2): the oldest goes.
        for _ in range(2):
            self.c.responses.create(model=MODEL, input=QUESTION, max_output_tokens=4, temperature=0)
        with self.assertRaises(openai.NotFoundError) as e:
            self.c.responses.create(model=MODEL, input="x", previous_response_id=first.id, max_output_tokens=4)
        self.assertIn("keeps the last 2", str(e.exception))
        # store: false keeps nothing.
        unstored = self.c.responses.create(model=MODEL, input=QUESTION, max_output_tokens=4, store=False)
        with self.assertRaises(openai.NotFoundError):
            self.c.responses.retrieve(unstored.id)

    def test_text_format_with_a_pydantic_model(self):
        r = self.c.responses.parse(model=MODEL, input="Name a city in France as JSON.", text_format=City,
                                   max_output_tokens=64, temperature=0)
        self.assertIsInstance(r.output_parsed, City)
        for body, field in (({"input": []}, "input"),
                            ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
                            ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
                            ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
                            ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
                             "input[0].content[0].type")):
            status, reply = self.s.post("/v1/responses", {"model": MODEL, **body})
            self.assertEqual(status, 400, (body, reply))
            self.assertIn(field, reply["error"]["message"])


if __name__ == "__main__":
    openai_test.SERVER = sys.argv[1]
    openai_test.LOADGEN = sys.argv[2]
    sys.argv = sys.argv[:1]
    unittest.main()
