#!/usr/bin/env python3
"""Reasoning output through the real flover_server on loopback, driven by
the official `openai` package: SmolLM2-135M-Instruct with a thinking-shaped
chat template (chat/templates/chatml_think.jinja: the assistant's turn opens
<think>, as Qwen3.5's and DeepSeek-R1's do), its replies held by a regex to
"reasoning</think>answer" (SmolLM2 does not think by itself). Greedy and
seeded replies split into reasoning_content and content the same way
streamed and whole; chat_template_kwargs' enable_thinking false closes the
thinking in the prompt (no reasoning); --reasoning_parser=none leaves the
text as it is; an earlier turn's reasoning_content reaches the template; and
bad fields are refused by name."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_test  # noqa: E402
from openai_test import CHAT_MODEL, Server  # noqa: E402

import openai  # noqa: E402

TEMPLATE = "chat/templates/chatml_think.jinja"
MODEL = "SmolLM2-135M-Instruct.Q4_1"
ASK = [{"role": "user", "content": "What is two plus two?"}]
# Reasoning (lower case words), the closing tag, then an answer.
SHAPE = r"[a-z]{1,8}( [a-z]{1,8}){2,5}\n</think>\n\n[A-Z][a-z]{1,8}( [a-z]{1,8}){1,4}\."


def whole_and_streamed(s, messages=ASK, **kw):
    """The reply whole (its message), and streamed (its deltas' reasoning and content joined)."""
    whole = s.openai.chat.completions.create(model=MODEL, messages=messages, **kw)
    reasoning, content = "", ""
    stream = s.openai.chat.completions.create(model=MODEL, messages=messages, stream=True, **kw)
    for chunk in stream:
        for c in chunk.choices:
            delta = c.delta.model_dump()
            reasoning += delta.get("reasoning_content") or ""
            content += delta.get("content") or ""
    return whole.choices[0].message, reasoning, content


class ReasoningTest(unittest.TestCase):
    def test_reasoning_split_the_same_streamed_and_whole(self):
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=512", "--threads=2", f"--chat_template={TEMPLATE}")
        try:
            for extra in ({"temperature": 0}, {"temperature": 0.9, "seed": 11}, {"temperature": 0.9, "seed": 12}):
                message, reasoning, content = whole_and_streamed(
                    s, max_tokens=100, extra_body={"guided_regex": SHAPE}, **extra)
                got = message.model_dump()
                self.assertTrue(got["reasoning_content"], got)
                self.assertTrue(message.content, got)
                self.assertNotIn("think>", message.content)
                self.assertNotIn("think>", got["reasoning_content"])
                # No whitespace kept next to the tags.
                self.assertEqual(got["reasoning_content"], got["reasoning_content"].strip())
                self.assertEqual(message.content, message.content.lstrip())
                self.assertEqual(reasoning, got["reasoning_content"], extra)
                self.assertEqual(content, message.content, extra)
            # gRPC: the reasoning apart from the text, the same split.
            msgs = list(s.client.generate(messages=ASK, regex=SHAPE, max_new_tokens=100, temperature=0))
            whole, _, _ = whole_and_streamed(s, max_tokens=100, temperature=0, extra_body={"guided_regex": SHAPE})
            self.assertEqual("".join(m.reasoning for m in msgs), whole.model_dump()["reasoning_content"])
            self.assertEqual("".join(m.text for m in msgs), whole.content)
            off = list(s.client.generate(messages=ASK, max_new_tokens=30, temperature=0,
                                         regex=r"[A-Z][a-z]{1,8}( [a-z]{1,8}){1,4}\.",
                                         chat_template_kwargs={"enable_thinking": False}))
            self.assertEqual("".join(m.reasoning for m in off), "")
            self.assertTrue("".join(m.text for m in off))
        finally:
            s.close()

    def test_enable_thinking_false_and_no_parser(self):
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=512", "--threads=2", f"--chat_template={TEMPLATE}")
        try:
            # The prompt closes the thinking: everything is the answer.
            message, reasoning, content = whole_and_streamed(
                s, max_tokens=30, temperature=0,
                extra_body={"guided_regex": r"[A-Z][a-z]{1,8}( [a-z]{1,8}){1,4}\.",
                            "chat_template_kwargs": {"enable_thinking": False}})
            self.assertIsNone(message.model_dump()["reasoning_content"])
            self.assertEqual(reasoning, "")
            self.assertEqual(content, message.content)
            self.assertTrue(message.content)
            # A prompt that closed its thinking is longer by the closed tags.
            on = s.post("/tokenize", {"messages": ASK})[1]["count"]
            off = s.post("/tokenize", {"messages": ASK, "chat_template_kwargs": {"enable_thinking": False}})[1]
            self.assertGreater(off["count"], on)
            # An earlier turn's reasoning goes back to the template.
            turn = [*ASK, {"role": "assistant", "content": "Four.", "reasoning_content": "two and two"},
                    {"role": "user", "content": "And three plus three?"}]
            status, with_reasoning = s.post("/tokenize", {"messages": turn})
            self.assertEqual(status, 200, with_reasoning)
            status, text = s.post("/detokenize", {"tokens": with_reasoning["tokens"]})
            self.assertIn("<think>\ntwo and two\n</think>\n\nFour.", text["content"])
            # Refused by name.
            for body, field in (({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
                                ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages"),
                                ({"reasoning_effort": "extreme"}, "reasoning_effort"),
                                ({"max_reasoning_tokens": 10}, "max_reasoning_tokens")):
                with self.assertRaises(openai.BadRequestError) as e:
                    s.openai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, extra_body=body)
                self.assertIn(field, str(e.exception))
            with self.assertRaises(openai.BadRequestError) as e:
                s.openai.chat.completions.create(
                    model=MODEL, max_tokens=4,
                    messages=[{"role": "user", "content": "x", "reasoning_content": "no"}])
            self.assertIn("messages[0].reasoning_content", str(e.exception))
        finally:
            s.close()
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=512", "--threads=2", f"--chat_template={TEMPLATE}",
                   "--reasoning_parser=none")
        try:
            message, _, content = whole_and_streamed(s, max_tokens=100, temperature=0,
                                                     extra_body={"guided_regex": SHAPE})
            self.assertNotIn("reasoning_content", message.model_dump(exclude_unset=True))
            self.assertIn("</think>", message.content)
            self.assertEqual(content, message.content)
        finally:
            s.close()


if __name__ == "__main__":
    openai_test.SERVER = sys.argv[1]
    openai_test.LOADGEN = sys.argv[2]
    sys.argv = sys.argv[:1]
    unittest.main()
