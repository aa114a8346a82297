#!/usr/bin/env python3
"""The OpenAI-compatible HTTP API of the real flover_server on loopback,
driven by the official `openai` Python package (and curl and a raw socket):
completions streamed and not, text and token prompts, stop strings, logprobs,
echo, every error status in OpenAI's shape, /health while draining, a client
that leaves mid-stream freeing its slot — and the same outputs as the same
request through gRPC. Chat completions on the real SmolLM2-135M-Instruct
GGUF file (tools/setup.sh fetches it): plain and streamed, greedy and
seeded, text parts, logprobs with alternatives, structured outputs, tool
calls (named, required, auto, streamed and not, with SmolLM2's own template
and with one that takes tools), each refusal by name, and the same
conversation through gRPC's messages."""
import faulthandler
import http.client
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.getcwd(), "clients", "python"))
import grpc  # noqa: E402
import openai  # noqa: E402

from flover_client import FloverClient, flover_pb2  # noqa: E402

SERVER = None
LOADGEN = None
TEXT_MODEL = "tests/golden/tiny_f32"  # GPT-2 fixture with a tokenizer, 40 positions
CHAT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"  # ChatML template, <|im_end|> ends a turn


class Server:
    def __init__(self, *flags):
        self.proc = subprocess.Popen([SERVER, "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
                                      *flags], stdout=subprocess.PIPE, text=True)
        grpc_line = self.proc.stdout.readline().strip()
        http_line = self.proc.stdout.readline().strip()
        assert grpc_line.startswith("listening on "), grpc_line
        assert http_line.startswith("openai api on "), http_line
        self.grpc = grpc_line[len("listening on "):]
        self.base_url = http_line[len("openai api on "):]
        self.hostport = self.base_url[len("http://"):-len("/v1")]
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.openai = openai.OpenAI(base_url=self.base_url, api_key="unused", max_retries=0)
        self.client = FloverClient(self.grpc)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()

    def grpc_generate(self, **kw):
        msgs = list(self.client.generate(**kw))
        ids = [t for m in msgs for t in m.token_ids]
        text = "".join(m.text for m in msgs)
        logprobs = [lp for m in msgs for lp in m.logprobs]
        return ids, text, logprobs, msgs[-1]

    def stats(self):
        return self.client.stats()

    def post(self, path, body):
        """POSTs a JSON body to the HTTP port; returns (status, parsed body)."""
        conn = http.client.HTTPConnection(self.hostport, timeout=60)
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()


def eventually(condition, timeout_s=60):
    """Polls `condition` until it holds; bounded so a broken server fails."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


class OpenAiApiTest(unittest.TestCase):
    def test_completions_equal_grpc_streamed_and_not(self):
        s = Server(f"--model={TEXT_MODEL}", "--max_seq_len=40", "--threads=2")
        try:
            self.assertEqual([m.id for m in s.openai.models.list().data], [TEXT_MODEL])

            # Greedy, text prompt: the same tokens and text as gRPC.
            r = s.openai.completions.create(model=TEXT_MODEL, prompt="The quick brown fox",
                                            max_tokens=12, temperature=0,
                                            extra_body={"ignore_eos": True})
            ids, text, _, last = s.grpc_generate(prompt="The quick brown fox", max_new_tokens=12,
                                                 temperature=0, ignore_eos=True)
            choice = r.choices[0]
            self.assertEqual(choice.text, text)
            self.assertEqual(choice.model_extra["token_ids"], ids)
            self.assertEqual(choice.finish_reason, "length")
            self.assertEqual(r.usage.completion_tokens, 12)
            self.assertEqual(r.usage.prompt_tokens, last.usage.prompt_tokens)
            self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 12)
            self.assertTrue(r.id.startswith("cmpl-"))
            self.assertEqual(r.model, TEXT_MODEL)

            # Streamed: the chunks add up to the same text, then usage.
            chunks = list(s.openai.completions.create(
                model=TEXT_MODEL, prompt="The quick brown fox", max_tokens=12, temperature=0,
                stream=True, stream_options={"include_usage": True},
                extra_body={"ignore_eos": True}))
            with_choices = [c for c in chunks if c.choices]
            self.assertGreater(len(with_choices), 1)
            self.assertEqual("".join(c.choices[0].text for c in with_choices), text)
            self.assertEqual([c.choices[0].finish_reason for c in with_choices][-1], "length")
            self.assertTrue(all(c.choices[0].finish_reason is None for c in with_choices[:-1]))
            self.assertEqual(sum(len(c.choices[0].model_extra["token_ids"]) for c in with_choices), 12)
            self.assertEqual(chunks[-1].usage.completion_tokens, 12)

            # Token prompt, seeded sampling: equal to gRPC with the same seed.
            r = s.openai.completions.create(model=TEXT_MODEL, prompt=[5, 6, 7], max_tokens=10,
                                            temperature=1.0, seed=7, extra_body={"ignore_eos": True})
            ids, text, _, _ = s.grpc_generate(token_ids=[5, 6, 7], max_new_tokens=10,
                                              temperature=1.0, seed=7, ignore_eos=True)
            self.assertEqual(r.choices[0].model_extra["token_ids"], ids)
            self.assertEqual(r.choices[0].text, text)

            # A stop string taken from the greedy text cuts it there.
            full = s.openai.completions.create(model=TEXT_MODEL, prompt="Hello", max_tokens=20,
                                               temperature=0, extra_body={"ignore_eos": True})
            full_text = full.choices[0].text
            stop = full_text[len(full_text) // 2:len(full_text) // 2 + 3]
            self.assertTrue(stop.strip(), full_text)
            cut = s.openai.completions.create(model=TEXT_MODEL, prompt="Hello", max_tokens=20,
                                              temperature=0, stop=[stop],
                                              extra_body={"ignore_eos": True})
            self.assertEqual(cut.choices[0].text, full_text[:full_text.index(stop)])
            self.assertEqual(cut.choices[0].finish_reason, "stop")

            # Log-probabilities of the sampled tokens, as gRPC returns them.
            r = s.openai.completions.create(model=TEXT_MODEL, prompt="Hello", max_tokens=6,
                                            temperature=0, logprobs=1,
                                            extra_body={"ignore_eos": True})
            _, _, grpc_lps, _ = s.grpc_generate(prompt="Hello", max_new_tokens=6, temperature=0,
                                                ignore_eos=True, return_logprobs=True)
            lp = r.choices[0].logprobs
            self.assertEqual(len(lp.tokens), 6)
            for a, b in zip(lp.token_logprobs, grpc_lps):
                self.assertAlmostEqual(a, b, places=5)
            self.assertEqual(len(lp.top_logprobs), 6)
            # logprobs=3: up to three alternatives per token (alternatives that
            # print alike keep the likeliest), the greedy token the likeliest.
            r = s.openai.completions.create(model=TEXT_MODEL, prompt="Hello", max_tokens=4,
                                            temperature=0, logprobs=3,
                                            extra_body={"ignore_eos": True})
            lp = r.choices[0].logprobs
            for token, token_lp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
                self.assertIn(len(top), (2, 3))
                best = max(top, key=top.get)
                self.assertEqual(best, token)
                self.assertAlmostEqual(top[best], token_lp, places=5)

            # echo puts the prompt's text first.
            r = s.openai.completions.create(model=TEXT_MODEL, prompt="Hello world", max_tokens=4,
                                            temperature=0, echo=True, extra_body={"ignore_eos": True})
            self.assertTrue(r.choices[0].text.startswith("Hello world"), r.choices[0].text)

            # curl, streamed: server-sent events ending in [DONE].
            out = subprocess.run(
                ["curl", "-sS", "-N", f"{s.base_url}/completions", "-H",
                 "Content-Type: application/json", "-d",
                 json.dumps({"prompt": "Hello", "max_tokens": 5, "stream": True,
                             "temperature": 0, "ignore_eos": True})],
                capture_output=True, text=True, timeout=60, check=True).stdout
            events = [e for e in out.split("\n\n") if e]
            self.assertEqual(events[-1], "data: [DONE]")
            self.assertTrue(all(e.startswith("data: ") for e in events), out)
            self.assertEqual(
                sum(len(json.loads(e[6:])["choices"][0]["token_ids"]) for e in events[:-1]), 5)
        finally:
            s.close()

    def test_load_client_over_http_gets_what_it_gets_over_grpc(self):
        # The same seeded plan (sampled, random prompts) through both front
        # ends of one server: every request's output ids are the same.
        s = Server("--model=builtin:tiny", "--max_seq_len=64", "--threads=2")
        try:
            with tempfile.TemporaryDirectory() as d:
                dumps = {}
                for name, target, extra in (("http", s.hostport, ["--http"]),
                                            ("grpc", s.grpc, [])):
                    dumps[name] = os.path.join(d, name + ".jsonl")
                    out = subprocess.run(
                        [LOADGEN, f"--target={target}", "--rate=200", "--num_requests=24",
                         "--prompt_len=uniform:1:16", "--output_len=uniform:1:24", "--seed=5",
                         "--temperature=1", "--ignore_eos", "--progress=false",
                         f"--dump_outputs={dumps[name]}", *extra],
                        capture_output=True, text=True, timeout=120)
                    self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
                    self.assertIn("completed 24, failed 0", out.stdout)
                with open(dumps["http"]) as h, open(dumps["grpc"]) as g:
                    http_lines, grpc_lines = h.read().splitlines(), g.read().splitlines()
                self.assertEqual(len(http_lines), 24)
                self.assertEqual(http_lines, grpc_lines)
                self.assertTrue(all(json.loads(x)["output_ids"] for x in http_lines))
            # --plot: the timings file and a PNG drawn by matplotlib (this
            # interpreter's); where matplotlib cannot be imported, a clear error.
            with tempfile.TemporaryDirectory() as d:
                png = os.path.join(d, "run.png")
                plot = [LOADGEN, f"--target={s.grpc}", "--rate=100", "--num_requests=10",
                        "--output_len=uniform:1:8", "--progress=false", f"--plot={png}"]
                out = subprocess.run(plot, capture_output=True, text=True, timeout=120,
                                     env=dict(os.environ, FLOVER_PYTHON=sys.executable))
                self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
                with open(png, "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
                with open(png + ".json") as f:
                    timings = json.load(f)["requests"]
                self.assertEqual(len(timings), 10)
                for t in timings:
                    self.assertTrue(t["ok"])
                    self.assertLessEqual(t["ttft_s"], t["e2e_s"])
                broken = os.path.join(d, "broken", "matplotlib")
                os.makedirs(broken)
                with open(os.path.join(broken, "__init__.py"), "w") as f:
                    f.write("raise ImportError('planted')\n")
                out = subprocess.run(plot, capture_output=True, text=True, timeout=120,
                                     env=dict(os.environ, FLOVER_PYTHON=sys.executable,
                                              PYTHONPATH=os.path.dirname(broken)))
                self.assertEqual(out.returncode, 3, out.stdout + out.stderr)
                self.assertIn("matplotlib is missing", out.stderr)
            # A burst of 64 connections at once: every one is served (the
            # library's default listen backlog of 5 used to drop some).
            out = subprocess.run(
                [LOADGEN, f"--target={s.hostport}", "--http", "--rate=inf", "--num_requests=64",
                 "--prompt_len=4", "--output_len=4", "--progress=false"],
                capture_output=True, text=True, timeout=120)
            self.assertIn("completed 64, failed 0", out.stdout, out.stdout + out.stderr)
        finally:
            s.close()

    def test_load_client_sends_constrained_load(self):
        # --json_schema: every request carries the schema (gRPC's constraint,
        # HTTP's response_format); the two front ends give the same outputs,
        # and every finished one is JSON that matches it.
        s = Server(f"--model={TEXT_MODEL}", "--max_seq_len=40", "--threads=2")
        try:
            with tempfile.TemporaryDirectory() as d:
                schema = os.path.join(d, "schema.json")
                with open(schema, "w") as f:
                    json.dump({"type": "object", "properties": {"ok": {"type": "boolean"}},
                               "required": ["ok"], "additionalProperties": False}, f)
                dumps = {}
                for name, target, extra in (("http", s.hostport, ["--http"]), ("grpc", s.grpc, [])):
                    dumps[name] = os.path.join(d, name + ".jsonl")
                    out = subprocess.run(
                        [LOADGEN, f"--target={target}", "--rate=200", "--num_requests=12",
                         "--prompt_len=uniform:1:8", "--output_len=24", "--seed=3", "--temperature=1",
                         "--progress=false", f"--json_schema={schema}", f"--dump_outputs={dumps[name]}",
                         *extra], capture_output=True, text=True, timeout=120)
                    self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
                    self.assertIn("completed 12, failed 0", out.stdout)
                with open(dumps["http"]) as h, open(dumps["grpc"]) as g:
                    lines = [json.loads(x) for x in h.read().splitlines()]
                    self.assertEqual([x["output_ids"] for x in lines],
                                     [json.loads(x)["output_ids"] for x in g.read().splitlines()])
                finished = [x for x in lines if x["finish_reason"] in ("stop", "eos")]
                self.assertGreaterEqual(len(finished), 6)
                for x in finished:
                    text = s.post("/detokenize", {"tokens": x["output_ids"]})[1]["prompt"]
                    self.assertIsInstance(json.loads(text)["ok"], bool, text)
                    self.assertEqual(list(json.loads(text)), ["ok"])
                with open(schema, "w") as f:
                    f.write("[1, 2]")
                out = subprocess.run([LOADGEN, f"--target={s.grpc}", f"--json_schema={schema}",
                                      "--num_requests=1"], capture_output=True, text=True, timeout=60)
                self.assertNotEqual(out.returncode, 0)
                self.assertIn("--json_schema", out.stderr)
        finally:
            s.close()

    def test_errors_take_openais_shape(self):
        s = Server(f"--model={TEXT_MODEL}", "--max_seq_len=40", "--threads=2")
        try:
            cases = [
                (dict(prompt="x", n=17), openai.BadRequestError, "n: at most 16", "n"),
                (dict(prompt="x", max_tokens=100), openai.BadRequestError,
                 "exceeds max_seq_len (40)", "max_tokens"),
                (dict(prompt=[1, 99999]), openai.BadRequestError, "outside the vocabulary",
                 "prompt"),
                (dict(prompt="x", logprobs=6), openai.BadRequestError,
                 "logprobs: at most 5", "logprobs"),
                (dict(prompt="x", top_p=0.0), openai.BadRequestError, "top_p: must be in (0, 1]", "top_p"),
                (dict(prompt="x", temperature=-1), openai.BadRequestError, "temperature: must be",
                 "temperature"),
            ]
            for kw, error, says, param in cases:
                with self.assertRaises(error) as err:
                    s.openai.completions.create(model=TEXT_MODEL, **kw)
                self.assertEqual(err.exception.status_code, 400, kw)
                self.assertIn(says, err.exception.body["message"], kw)
                self.assertEqual(err.exception.body["type"], "invalid_request_error", kw)
                self.assertEqual(err.exception.body["param"], param, kw)
            with self.assertRaises(openai.NotFoundError) as err:
                s.openai.completions.create(model="gpt-4", prompt="x")
            self.assertIn("is not served here", err.exception.body["message"])
            self.assertEqual(err.exception.body["param"], "model")
            # Every refusal was counted, nothing was queued.
            self.assertEqual(s.stats().requests_submitted, 0)
        finally:
            s.close()

        # A full queue is 429.
        s = Server(f"--model={TEXT_MODEL}", "--max_seq_len=40", "--max_queue=0", "--threads=1")
        try:
            with self.assertRaises(openai.RateLimitError) as err:
                s.openai.completions.create(model=TEXT_MODEL, prompt="x")
            self.assertEqual(err.exception.status_code, 429)
            self.assertIn("queue is full", err.exception.body["message"])
        finally:
            s.close()

    def test_draining_answers_503_and_disconnect_frees_the_slot(self):
        # GPT-2-small shapes with GPT-2's vocabulary: a 400-token request runs
        # for seconds, so the client can leave mid-stream. The drain timeout
        # is only an upper bound (under ThreadSanitizer the 120-token request
        # below outlived 60 s).
        s = Server("--model=builtin:gpt2-small", "--max_seq_len=512", "--max_batch=2",
                   "--threads=2", "--drain_timeout_s=600")
        try:
            conn = http.client.HTTPConnection(s.hostport, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps(
                {"prompt": "Once upon a time", "max_tokens": 400, "stream": True,
                 "ignore_eos": True}), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.getheader("Content-Type"), "text/event-stream")
            self.assertTrue(resp.readline().startswith(b"data: "))  # tokens are flowing
            self.assertEqual(s.stats().active_sequences, 1)
            conn.sock.shutdown(2)
            conn.close()
            self.assertTrue(eventually(lambda: s.stats().active_sequences == 0),
                            "the slot was never freed")
            stats = s.stats()
            self.assertEqual(stats.requests_finished["cancelled"], 1)
            self.assertLess(stats.tokens_generated, 400)

            # Drain: /health turns 503 and new completions are refused with 503
            # while an in-flight one finishes.
            health = http.client.HTTPConnection(s.hostport, timeout=10)
            health.request("GET", "/health")
            self.assertEqual(health.getresponse().status, 200)
            results = {}
            long_call = threading.Thread(target=lambda: results.update(r=s.openai.completions.create(
                model="builtin:gpt2-small", prompt="Once", max_tokens=120, temperature=0,
                extra_body={"ignore_eos": True})))
            long_call.start()
            self.assertTrue(eventually(lambda: s.stats().active_sequences == 1))
            s.proc.send_signal(signal.SIGTERM)

            def health_status():
                h = http.client.HTTPConnection(s.hostport, timeout=10)
                h.request("GET", "/health")
                return h.getresponse().status
            self.assertTrue(eventually(lambda: health_status() == 503))
            with self.assertRaises(openai.InternalServerError) as err:
                s.openai.completions.create(model="builtin:gpt2-small", prompt="late", max_tokens=2)
            self.assertEqual(err.exception.status_code, 503)
            long_call.join(timeout=600)
            self.assertEqual(results["r"].usage.completion_tokens, 120)
            self.assertEqual(s.proc.wait(timeout=60), 0)
        finally:
            s.close()


class ChatTest(unittest.TestCase):
    QUESTION = [{"role": "user", "content": "Which city is the capital of France?"}]

    def test_chat_plain_and_streamed_equal_grpc(self):
        s = Server(f"--model={CHAT_MODEL}", "--served_model_name=smollm2", "--max_seq_len=512",
                   "--max_batch=4", "--threads=2")
        try:
            self.assertEqual([m.id for m in s.openai.models.list().data], ["smollm2"])
            info = s.client.model_info()
            self.assertTrue(info.has_chat_template)
            self.assertEqual(info.served_model_name, "smollm2")

            # Greedy: a real answer, ended by the template's <|im_end|>.
            r = s.openai.chat.completions.create(model="smollm2", messages=self.QUESTION,
                                                 max_tokens=40, temperature=0)
            choice = r.choices[0]
            self.assertEqual(choice.message.role, "assistant")
            self.assertEqual(choice.message.content, "The capital of France is Paris.")
            self.assertEqual(choice.finish_reason, "stop")
            self.assertTrue(r.id.startswith("chatcmpl-"))
            self.assertEqual(r.object, "chat.completion")
            self.assertEqual(r.model, "smollm2")
            # The template's default system prompt is part of the prompt.
            self.assertEqual(r.usage.prompt_tokens, 38)
            ids = choice.model_extra["token_ids"]
            self.assertEqual(ids[-1], 2)  # <|im_end|>, left out of the text
            self.assertEqual(r.usage.completion_tokens, len(ids))

            # The same conversation over gRPC: same tokens and text.
            g_ids, g_text, _, last = s.grpc_generate(messages=self.QUESTION, max_new_tokens=40,
                                                     temperature=0)
            self.assertEqual(g_ids, ids)
            self.assertEqual(g_text, choice.message.content)
            self.assertEqual(last.finish_reason, 3)  # EOS (flover.v1.EOS)

            # Streamed: a role chunk, deltas that add up, a finish chunk, usage.
            chunks = list(s.openai.chat.completions.create(
                model="smollm2", messages=self.QUESTION, max_tokens=40, temperature=0,
                stream=True, stream_options={"include_usage": True}))
            self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
            self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
            with_choices = [c for c in chunks if c.choices]
            self.assertEqual("".join(c.choices[0].delta.content or "" for c in with_choices),
                             choice.message.content)
            self.assertEqual(with_choices[-1].choices[0].finish_reason, "stop")
            self.assertTrue(all(c.choices[0].finish_reason is None for c in with_choices[:-1]))
            self.assertEqual(chunks[-1].usage.completion_tokens, len(ids))
            self.assertEqual(chunks[-1].choices, [])

            # A length cut; content as text parts; max_completion_tokens.
            r = s.openai.chat.completions.create(
                model="smollm2", max_completion_tokens=3, temperature=0,
                messages=[{"role": "user", "content": [{"type": "text", "text": "What is the capital"},
                                                      {"type": "text", "text": "of France?"}]}])
            self.assertEqual(r.choices[0].finish_reason, "length")
            self.assertEqual(r.usage.completion_tokens, 3)

            # A system message replaces the template's default one.
            r = s.openai.chat.completions.create(
                model="smollm2", max_tokens=12, temperature=0,
                messages=[{"role": "system", "content": "Answer in one word."}] + self.QUESTION)
            self.assertLess(r.usage.prompt_tokens, 38)

            # Seeded sampling repeats itself, and equals gRPC with that seed.
            def sampled():
                return s.openai.chat.completions.create(
                    model="smollm2", messages=self.QUESTION, max_tokens=16, temperature=0.9,
                    seed=11).choices[0].model_extra["token_ids"]
            first = sampled()
            self.assertEqual(sampled(), first)
            g_ids, _, _, _ = s.grpc_generate(messages=self.QUESTION, max_new_tokens=16,
                                             temperature=0.9, seed=11)
            self.assertEqual(g_ids, first)

            # Log-probabilities with alternatives, from the drawing distribution.
            r = s.openai.chat.completions.create(model="smollm2", messages=self.QUESTION,
                                                 max_tokens=8, temperature=0, logprobs=True,
                                                 top_logprobs=3)
            content = r.choices[0].logprobs.content
            self.assertEqual(len(content), r.usage.completion_tokens)
            self.assertEqual(content[0].token, "The")
            for entry in content:
                self.assertEqual(len(entry.top_logprobs), 3)
                self.assertEqual(entry.top_logprobs[0].token, entry.token)  # greedy: the top one
                self.assertAlmostEqual(entry.top_logprobs[0].logprob, entry.logprob, places=5)
                self.assertGreaterEqual(entry.top_logprobs[1].logprob, entry.top_logprobs[2].logprob)
                self.assertEqual(bytes(entry.bytes).decode("utf-8", "replace"), entry.token)
        finally:
            s.close()

    def test_guided_choice_answers_with_one_of_the_choices(self):
        s = Server(f"--model={CHAT_MODEL}", "--served_model_name=smollm2", "--max_seq_len=512",
                   "--max_batch=8", "--threads=2")
        try:
            choices = ["Paris", "London", "I do not know"]
            question = [{"role": "user", "content": "Which city is the capital of France?"}]
            r = s.openai.chat.completions.create(model="smollm2", messages=question, max_tokens=20,
                                                 temperature=0, logprobs=True, top_logprobs=2,
                                                 extra_body={"guided_choice": choices})
            # (Greedy under the mask takes this small model to "London": its
            # likeliest first token, "L", stands for "Le"/"La" unconstrained.)
            self.assertIn(r.choices[0].message.content, choices)
            self.assertEqual(r.choices[0].finish_reason, "stop")
            first = r.choices[0].logprobs.content[0]
            self.assertLessEqual(sum(math.exp(a.logprob) for a in first.top_logprobs), 1.0 + 1e-6)
            # Log-probabilities of the masked distribution: the alternatives
            # spell a choice too.
            for entry in r.choices[0].logprobs.content:
                for alt in entry.top_logprobs:
                    self.assertTrue(any(c.startswith(alt.token) or alt.token in c for c in choices),
                                    alt.token)
            # Sampled, hot: every answer is still one of them; streamed the same.
            for seed in range(6):
                r = s.openai.chat.completions.create(
                    model="smollm2", messages=question, max_tokens=20, temperature=1.8, seed=seed,
                    extra_body={"guided_choice": choices})
                self.assertIn(r.choices[0].message.content, choices)
                chunks = list(s.openai.chat.completions.create(
                    model="smollm2", messages=question, max_tokens=20, temperature=1.8, seed=seed,
                    stream=True, extra_body={"guided_choice": choices}))
                self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                                 r.choices[0].message.content)
            # Completions take it too.
            r = s.openai.completions.create(model="smollm2", prompt="The capital of France is",
                                            max_tokens=10, temperature=0,
                                            extra_body={"guided_choice": [" Paris", " Rome"]})
            self.assertIn(r.choices[0].text, [" Paris", " Rome"])
            # Refusals name the field.
            for bad, says in (([], "guided_choice: must list at least one string"),
                              (["a", "a"], "guided_choice[1]: repeats an earlier choice"),
                              ("yes", "guided_choice: must be a list of strings")):
                with self.assertRaises(openai.BadRequestError) as err:
                    s.openai.chat.completions.create(model="smollm2", messages=question,
                                                     max_tokens=4, extra_body={"guided_choice": bad})
                self.assertIn(says, err.exception.body["message"])
                self.assertTrue(err.exception.body["param"].startswith("guided_choice"))
        finally:
            s.close()

    def test_structured_outputs_parse_into_pydantic_models(self):
        import pydantic

        class City(pydantic.BaseModel):
            name: str
            country: str
            # Bounded: this 135M model otherwise repeats digits until the
            # token limit (the schema would allow any number).
            population_millions: int = pydantic.Field(ge=0, le=100)
            is_capital: bool

        s = Server(f"--model={CHAT_MODEL}", "--served_model_name=smollm2", "--max_seq_len=512",
                   "--max_batch=8", "--threads=2")
        try:
            question = [{"role": "user", "content": "Describe Paris as JSON with its name, "
                         "country, population in millions and whether it is a capital."}]
            # The official client's parse(): a json_schema response_format
            # (strict, from the pydantic model), parsed back into the model.
            r = s.openai.chat.completions.parse(model="smollm2", messages=question,
                                                response_format=City, max_tokens=120,
                                                temperature=0)
            city = r.choices[0].message.parsed
            self.assertIsInstance(city, City)
            self.assertEqual(r.choices[0].finish_reason, "stop")
            json.loads(r.choices[0].message.content)  # compact, valid JSON
            # Sampled too: every answer validates.
            for seed in range(4):
                r = s.openai.chat.completions.parse(model="smollm2", messages=question,
                                                    response_format=City, max_tokens=160,
                                                    temperature=1.0, seed=seed)
                if r.choices[0].finish_reason == "stop":
                    self.assertIsInstance(r.choices[0].message.parsed, City)
            # Any JSON object; a regex; a grammar (vLLM's fields).
            r = s.openai.chat.completions.create(model="smollm2", messages=question, max_tokens=100,
                                                 temperature=0,
                                                 response_format={"type": "json_object"})
            self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
            r = s.openai.completions.create(model="smollm2", prompt="A date: ", max_tokens=20,
                                            temperature=0,
                                            extra_body={"guided_regex": r"\d{4}-\d{2}-\d{2}"})
            self.assertRegex(r.choices[0].text, r"^\d{4}-\d{2}-\d{2}$")
            r = s.openai.completions.create(model="smollm2", prompt="Yes or no? ", max_tokens=20,
                                            temperature=0,
                                            extra_body={"guided_grammar": 'root ::= "yes" | "no"'})
            self.assertIn(r.choices[0].text, ["yes", "no"])
            # Bad schemas, regexes and grammars are 400s naming the field.
            for kw, param in (
                    (dict(response_format={"type": "json_schema", "json_schema": {
                        "name": "x", "schema": {"type": "nosuchtype"}}}),
                     "response_format.json_schema.schema"),
                    (dict(extra_body={"guided_regex": "(unclosed"}), "guided_regex"),
                    (dict(extra_body={"guided_grammar": "root ::= "}), "guided_grammar")):
                with self.assertRaises(openai.BadRequestError) as err:
                    s.openai.chat.completions.create(model="smollm2", messages=question,
                                                     max_tokens=4, **kw)
                self.assertEqual(err.exception.body["param"], param, kw)
        finally:
            s.close()

    TOOLS = [{"type": "function", "function": {
                  "name": "get_weather", "description": "Get the current weather in a city",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]}}},
             {"type": "function", "function": {
                  "name": "get_time", "description": "Get the local time in a city",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"], "additionalProperties": False}}}]
    WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    # One exchange with a call, then a new question: the model takes up the pattern.
    HISTORY = [{"role": "user", "content": "What is the weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature_c\": 21}"},
               {"role": "assistant", "content": "It is 21°C in Paris."},
               {"role": "user", "content": "What is the weather in Tokyo?"}]

    # Two questions answered by calls, then a third: the model calls again.
    CALLS = [{"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function",
                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
             {"role": "user", "content": "Weather in Rome?"},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_2", "type": "function",
                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
             {"role": "user", "content": "Weather in Tokyo?"}]

    def assert_calls(self, choice, names):
        """The choice ended in tool calls of these functions, each with arguments
        that match the function's schema (a city, a string, and nothing else)."""
        self.assertEqual(choice.finish_reason, "tool_calls")
        calls = choice.message.tool_calls
        self.assertEqual([c.function.name for c in calls], names)
        for c in calls:
            self.assertTrue(c.id.startswith("call_"))
            self.assertEqual(c.type, "function")
            args = json.loads(c.function.arguments)
            self.assertIsInstance(args["city"], str)
            self.assertEqual(list(args), ["city"])
        self.assertEqual(len({c.id for c in calls}), len(calls))
        return calls

    def test_tool_calls_named_required_auto_and_streamed(self):
        """SmolLM2's own template takes no tools: they are described in its
        system message, and the grammar makes the calls."""
        s = Server(f"--model={CHAT_MODEL}", "--served_model_name=smollm2", "--max_seq_len=1024",
                   "--max_batch=8", "--threads=2")
        try:
            create = lambda **kw: s.openai.chat.completions.create(  # noqa: E731
                model="smollm2", tools=self.TOOLS, temperature=0, max_tokens=60, **kw)
            named = {"type": "function", "function": {"name": "get_time"}}
            r = create(messages=self.WEATHER, tool_choice=named)
            calls = self.assert_calls(r.choices[0], ["get_time"])
            self.assertIsNone(r.choices[0].message.content)
            # Required, one call: either function.
            r = create(messages=self.WEATHER, tool_choice="required", parallel_tool_calls=False)
            self.assertEqual(len(r.choices[0].message.tool_calls), 1)
            self.assert_calls(r.choices[0], [r.choices[0].message.tool_calls[0].function.name])
            # Streamed: each call's id, type and name first, then its arguments
            # as the model writes them (in several deltas: {"city": "Paris"} is
            # more than one token); the same call as unstreamed.
            deltas, finish = [], None
            for chunk in create(messages=self.WEATHER, tool_choice=named, stream=True):
                if chunk.choices and chunk.choices[0].delta.tool_calls:
                    deltas += chunk.choices[0].delta.tool_calls
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
            self.assertEqual(finish, "tool_calls")
            self.assertEqual((deltas[0].index, deltas[0].type, deltas[0].function.name,
                              deltas[0].function.arguments), (0, "function", "get_time", ""))
            self.assertTrue(deltas[0].id.startswith("call_"))
            self.assertTrue(all(d.index == 0 and d.id is None for d in deltas[1:]))
            self.assertGreater(len(deltas), 2)
            self.assertEqual(json.loads("".join(d.function.arguments for d in deltas[1:])),
                             json.loads(calls[0].function.arguments))
            # Auto: text, or a call once the model starts one. After a call and
            # its result it answers with text (that starts like a call's tag,
            # held back while it could be one, then sent as content); after two
            # calls in a row it calls.
            r = create(messages=self.HISTORY)
            self.assertEqual(r.choices[0].finish_reason, "stop")
            self.assertIsNone(r.choices[0].message.tool_calls)
            self.assertTrue(r.choices[0].message.content.startswith("<tool_response>"))
            streamed = "".join(c.choices[0].delta.content or "" for c in create(messages=self.HISTORY, stream=True)
                               if c.choices)
            self.assertEqual(streamed, r.choices[0].message.content)
            r = create(messages=self.CALLS)
            self.assert_calls(r.choices[0], ["get_weather"])
            self.assertEqual(json.loads(r.choices[0].message.tool_calls[0].function.arguments), {"city": "Tokyo"})
            # gRPC: the same call, on the last message, with the raw text streamed.
            msgs = list(s.client.generate(messages=self.WEATHER, tools=self.TOOLS, tool_choice="get_time",
                                          temperature=0, max_new_tokens=60))
            self.assertEqual(msgs[-1].finish_reason, flover_pb2.TOOL_CALLS)
            self.assertEqual([(c.name, c.arguments) for c in msgs[-1].tool_calls],
                             [("get_time", calls[0].function.arguments)])
            self.assertIn("<tool_call>", "".join(m.text for m in msgs))
            msgs = list(s.client.generate(messages=self.CALLS, tools=self.TOOLS, temperature=0,
                                          max_new_tokens=60))
            self.assertEqual([c.name for c in msgs[-1].tool_calls], ["get_weather"])
            # none: the tools are shown, no call is read.
            r = create(messages=self.WEATHER, tool_choice="none")
            self.assertIsNone(r.choices[0].message.tool_calls)
            self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        finally:
            s.close()

    def test_tool_calls_with_a_template_that_takes_tools(self):
        s = Server(f"--model={CHAT_MODEL}", "--served_model_name=smollm2", "--max_seq_len=1024",
                   "--max_batch=8", "--threads=2", "--chat_template=chat/templates/chatml_tools.jinja")
        try:
            create = lambda **kw: s.openai.chat.completions.create(  # noqa: E731
                model="smollm2", tools=self.TOOLS, temperature=0, max_tokens=80, **kw)
            # Parallel calls: as many as the model writes, each valid, then the end.
            r = create(messages=self.WEATHER, tool_choice="required")
            calls = r.choices[0].message.tool_calls
            self.assertGreaterEqual(len(calls), 1)
            self.assert_calls(r.choices[0], [c.function.name for c in calls])
            r = create(messages=self.CALLS)  # auto
            self.assert_calls(r.choices[0], ["get_weather"])
            # Streamed, the same calls.
            names, finish = [], None
            for chunk in create(messages=self.WEATHER, tool_choice="required", stream=True):
                for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    if d.function.name:
                        names.append(d.function.name)
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
            self.assertEqual((names, finish), ([c.function.name for c in calls], "tool_calls"))
        finally:
            s.close()
        # Mistral's list format, enforced: SmolLM2's vocabulary has no
        # [TOOL_CALLS] token, so the marker is text the grammar writes (a
        # vocabulary with it as a special token gets the token:
        # engine/grammar_constraint_test).
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=1024", "--threads=2", "--tool_call_parser=mistral")
        name = "SmolLM2-135M-Instruct.Q4_1"
        try:
            r = s.openai.chat.completions.create(model=name, messages=self.WEATHER, tools=self.TOOLS,
                                                 tool_choice="required", temperature=0, max_tokens=120)
            self.assertGreaterEqual(len(r.choices[0].message.tool_calls or []), 1)
            self.assert_calls(r.choices[0], [c.function.name for c in r.choices[0].message.tool_calls])
            r = s.openai.chat.completions.create(model=name, messages=self.WEATHER, tools=self.TOOLS,
                                                 tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                                 temperature=0, max_tokens=80)
            self.assert_calls(r.choices[0], ["get_weather"])
            msgs = list(s.client.generate(messages=self.WEATHER, tools=self.TOOLS, tool_choice="get_time",
                                          temperature=0, max_new_tokens=60))
            self.assertEqual([c.name for c in msgs[-1].tool_calls], ["get_time"])
            self.assertTrue("".join(m.text for m in msgs).startswith("[TOOL_CALLS] [{\"name\": \"get_time\""))
            r = s.openai.chat.completions.create(model=name, messages=self.WEATHER, tools=self.TOOLS,
                                                 tool_choice="none", max_tokens=4)
            self.assertEqual(r.choices[0].finish_reason, "length")
        finally:
            s.close()

    def test_n_samples_share_the_prompt_and_take_seed_plus_i(self):
        s = Server(f"--model={CHAT_MODEL}", "--served_model_name=smollm2", "--max_seq_len=512",
                   "--max_batch=8", "--threads=2")
        try:
            long_question = [{"role": "user", "content": "Tell me about the history of Paris, "
                              "the capital of France, in a few words."}]
            before = s.stats()
            r = s.openai.chat.completions.create(model="smollm2", messages=long_question, n=3,
                                                 max_tokens=8, temperature=1.0, seed=5)
            self.assertEqual([c.index for c in r.choices], [0, 1, 2])
            ids = [c.model_extra["token_ids"] for c in r.choices]
            self.assertEqual(r.usage.completion_tokens, sum(len(i) for i in ids))
            # Sample i draws with seed + i: each equals a single request with it.
            for i in range(3):
                one = s.openai.chat.completions.create(model="smollm2", messages=long_question,
                                                       max_tokens=8, temperature=1.0, seed=5 + i)
                self.assertEqual(one.choices[0].model_extra["token_ids"], ids[i], i)
            # The siblings found the first sample's prompt blocks in the cache.
            after = s.stats()
            self.assertGreaterEqual(after.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens,
                                    2 * 32)
            # Streamed: chunks of both choices, each ending once.
            chunks = list(s.openai.chat.completions.create(
                model="smollm2", messages=long_question, n=2, max_tokens=6, temperature=1.0,
                seed=5, stream=True, stream_options={"include_usage": True}))
            texts = {0: "", 1: ""}
            ends = {0: 0, 1: 0}
            for c in chunks:
                for ch in c.choices:
                    texts[ch.index] += ch.delta.content or ""
                    ends[ch.index] += ch.finish_reason is not None
            self.assertEqual(ends, {0: 1, 1: 1})
            whole = s.openai.chat.completions.create(model="smollm2", messages=long_question, n=2,
                                                     max_tokens=6, temperature=1.0, seed=5)
            self.assertEqual([texts[0], texts[1]], [c.message.content for c in whole.choices])
            self.assertEqual(chunks[-1].usage.completion_tokens, 12)
            # best_of stays refused, saying what is served instead.
            with self.assertRaises(openai.BadRequestError) as err:
                s.openai.completions.create(model="smollm2", prompt="x", max_tokens=2, best_of=2)
            self.assertIn("best_of: only 1 is supported", err.exception.body["message"])
        finally:
            s.close()

    # A text to work from: answers that copy from their prompt are where
    # n-gram drafts are taken.
    PASSAGE = ("The lighthouse stood on the northern cliff for two hundred years. Every night its keeper "
               "climbed the ninety steps, trimmed the wick, and wound the clockwork that turned the lens. "
               "Ships passing the reef at night looked for its light, three short flashes and one long, "
               "and steered wide of the rocks. When the keeper grew old, his daughter climbed the steps "
               "instead, and the light never once failed.")

    def test_speculative_decoding_changes_no_output(self):
        """--speculative=ngram: every answer (greedy and seeded sampling, with
        logprobs, beside other requests) equals the same request with
        speculation opted out, on both APIs; drafts were verified, many
        taken, so a copying answer takes fewer steps than tokens."""
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=1024", "--max_batch=8", "--threads=2",
                   "--speculative=ngram")
        try:
            copy = [{"role": "user", "content": "Repeat this text exactly:\n\n" + self.PASSAGE}]
            summary = [{"role": "user", "content": "Summarise, quoting it:\n\n" + self.PASSAGE}]
            story = [{"role": "user", "content": "Write a short story about a lighthouse."}]
            cases = [dict(messages=copy, temperature=0), dict(messages=summary, temperature=0),
                     dict(messages=story, temperature=0),
                     dict(messages=copy, temperature=0.8, seed=7),
                     dict(messages=summary, temperature=0.7, top_p=0.9, seed=11)]
            # Constrained: drafts of what the grammar fixes (keys, punctuation).
            city = {"type": "json_schema", "json_schema": {"name": "city", "schema": {
                "type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"},
                                                 "population_millions": {"type": "integer"},
                                                 "is_capital": {"type": "boolean"}},
                "required": ["city", "country", "population_millions", "is_capital"],
                "additionalProperties": False}}}
            paris = [{"role": "user", "content": "Describe Paris as JSON: city, country, population, capital."}]
            cases += [dict(messages=paris, temperature=0, response_format=city),
                      dict(messages=paris, temperature=0.9, seed=3, response_format=city),
                      dict(messages=self.WEATHER, tools=self.TOOLS, tool_choice="required", temperature=0)]

            def answer(case, spec):
                r = s.openai.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", max_tokens=120,
                                                     logprobs=True, top_logprobs=2,
                                                     extra_body={"speculative": spec}, **case)
                c = r.choices[0]
                calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
                return c.message.content, calls, c.finish_reason, [
                    (t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs]) for t in c.logprobs.content]

            # All at once with speculation (fused with each other), then each
            # alone without.
            results = [None] * len(cases)
            threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, answer(cases[i], True)))
                       for i in range(len(cases))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for case, got in zip(cases, results):
                self.assertEqual(got, answer(case, False), case)
            st = s.stats()
            self.assertGreater(st.speculative_accepted_tokens, 0)
            self.assertLessEqual(st.speculative_accepted_tokens, st.speculative_draft_tokens)
            # The copying answer alone: fewer steps than tokens.
            before = s.stats()
            answer(cases[0], True)
            after = s.stats()
            self.assertLess(after.steps - before.steps, after.tokens_generated - before.tokens_generated)
            # So does the JSON answer alone: the grammar's keys are drafted.
            before = s.stats()
            answer(cases[5], True)
            after = s.stats()
            self.assertLess(after.steps - before.steps, after.tokens_generated - before.tokens_generated)
            # gRPC: the same tokens with and without.
            on = s.grpc_generate(messages=copy, max_new_tokens=80, temperature=0)[0]
            off = s.grpc_generate(messages=copy, max_new_tokens=80, temperature=0, speculative=False)[0]
            self.assertEqual(on, off)
        finally:
            s.close()

    def test_tokenize_and_detokenize(self):
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=512", "--threads=2")
        try:
            status, body = s.post("/tokenize", {"prompt": "The capital of France"})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["count"], len(body["tokens"]))
            self.assertEqual(body["max_model_len"], 512)
            # The same tokens the completions endpoint computes on.
            r = s.openai.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                            prompt="The capital of France", max_tokens=1,
                                            temperature=0)
            self.assertEqual(r.usage.prompt_tokens, body["count"])
            # llama-server's spelling; and back to text.
            self.assertEqual(s.post("/tokenize", {"content": "The capital of France"})[1]["tokens"],
                             body["tokens"])
            status, text = s.post("/detokenize", {"tokens": body["tokens"]})
            self.assertEqual(status, 200, text)
            self.assertEqual(text["prompt"], "The capital of France")
            self.assertEqual(text["content"], "The capital of France")
            # A chat through the template: as many tokens as chat completions count.
            status, chat = s.post("/tokenize", {"messages": self.QUESTION})
            self.assertEqual(status, 200, chat)
            r = s.openai.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                                 messages=self.QUESTION, max_tokens=1)
            self.assertEqual(chat["count"], r.usage.prompt_tokens)
            # Refusals name the field.
            status, err = s.post("/detokenize", {"tokens": [1, -1]})
            self.assertEqual(status, 400)
            self.assertEqual(err["error"]["param"], "tokens")
            status, err = s.post("/tokenize", {})
            self.assertEqual(status, 400)
            self.assertEqual(err["error"]["param"], "prompt")
        finally:
            s.close()

    def test_chat_refusals_name_the_field(self):
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=256", "--threads=2")
        name = "SmolLM2-135M-Instruct.Q4_1"  # the file's name, without --served_model_name
        try:
            self.assertEqual(s.client.model_info().served_model_name, name)
            cases = [
                (dict(messages=[{"role": "robot", "content": "x"}]), "is not supported (system, user, "
                 "assistant, tool)", "messages[0].role"),
                (dict(messages=[{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "ftp://x"}}]}]),
                 "only data:, http:// and https:// URLs are taken", "messages[0].content[0].image_url.url"),
                (dict(messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]),
                 "'input_audio' is not supported (text and image_url)", "messages[0].content[0].type"),
                (dict(messages=self.QUESTION, n=17), "n: at most 16, got 17", "n"),
                (dict(messages=self.QUESTION, top_logprobs=2), "needs logprobs: true", "top_logprobs"),
                (dict(messages=self.QUESTION, max_tokens=300), "exceeds max_seq_len (256)", "max_tokens"),
                (dict(messages=self.QUESTION, tool_choice="required"), "needs tools", "tool_choice"),
                (dict(messages=self.QUESTION, tools=self.TOOLS,
                      tool_choice={"type": "function", "function": {"name": "nope"}}),
                 "no tool is named 'nope'", "tool_choice"),
                (dict(messages=self.QUESTION, tools=[{"type": "function", "function": {"name": "a b"}}]),
                 "'a b' is not a function name", "tools[0].function.name"),
                (dict(messages=self.QUESTION, tools=self.TOOLS[:1] * 2), "'get_weather' is offered twice",
                 "tools[1].function.name"),
                (dict(messages=self.QUESTION, tools=self.TOOLS, response_format={"type": "json_object"}),
                 "send tool_choice \"none\" with it", "tool_choice"),
                (dict(messages=self.QUESTION, tools=[{"type": "function", "function": {
                    "name": "f", "parameters": {"type": "object", "not": {"properties": {"a": {"type": "string"}}}}}}]),
                 "the keyword not is not supported", "tools[0].function.parameters"),
                (dict(messages=self.QUESTION, tools=[{"type": "function", "function": {
                    "name": "f", "parameters": {"type": "object", "not": {}}}}]),
                 "no value is valid under this schema", "tools[0].function.parameters"),
                (dict(messages=self.QUESTION, tools=self.TOOLS, tool_choice={"type": "function"}),
                 "tool_choice: must be none, auto, required", "tool_choice"),
            ]
            for kw, says, param in cases:
                with self.assertRaises(openai.BadRequestError) as err:
                    s.openai.chat.completions.create(model=name, **kw)
                self.assertIn(says, err.exception.body["message"], kw)
                self.assertEqual(err.exception.body["param"], param, kw)
            with self.assertRaises(openai.NotFoundError):
                s.openai.chat.completions.create(model="gpt-4o", messages=self.QUESTION)
            # An unknown path: 404 in OpenAI's shape.
            h = http.client.HTTPConnection(s.hostport, timeout=10)
            h.request("POST", "/v1/embeddings", body="{}")
            resp = h.getresponse()
            self.assertEqual(resp.status, 404)
            self.assertIn("no route for POST /v1/embeddings", json.loads(resp.read())["error"]["message"])
            self.assertEqual(s.stats().requests_submitted, 0)

            # Without max_tokens a reply may fill the context (256 positions), as OpenAI's may.
            r = s.openai.chat.completions.create(model=name, messages=self.QUESTION, temperature=0,
                                                 extra_body={"ignore_eos": True})
            self.assertEqual(r.choices[0].finish_reason, "length")
            self.assertEqual(r.usage.prompt_tokens + r.usage.completion_tokens, 256)
            with self.assertRaises(openai.BadRequestError) as err:  # a prompt that fills it already
                s.openai.chat.completions.create(
                    model=name, messages=[{"role": "user", "content": "Paris " * 300}])
            self.assertIn("max_seq_len (256)", err.exception.body["message"])
        finally:
            s.close()

        # No chat template: a 400 that says so; a template's raise_exception: its message.
        s = Server(f"--model={TEXT_MODEL}", "--max_seq_len=40", "--threads=1")
        try:
            with self.assertRaises(openai.BadRequestError) as err:
                s.openai.chat.completions.create(model=TEXT_MODEL, messages=self.QUESTION)
            self.assertIn("this model has no chat template", err.exception.body["message"])
        finally:
            s.close()
        with tempfile.NamedTemporaryFile("w", suffix=".jinja") as t:
            t.write("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
                    "supported') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}")
            t.flush()
            s = Server(f"--model={TEXT_MODEL}", "--max_seq_len=40", "--threads=1",
                       f"--chat_template={t.name}")
            try:
                r = s.openai.chat.completions.create(model=TEXT_MODEL, max_tokens=2, temperature=0,
                                                     messages=[{"role": "user", "content": "Hi"}])
                self.assertEqual(r.choices[0].finish_reason, "length")
                with self.assertRaises(openai.BadRequestError) as err:
                    s.openai.chat.completions.create(
                        model=TEXT_MODEL, messages=[{"role": "system", "content": "S"}] + self.QUESTION)
                self.assertEqual(err.exception.body["message"], "messages: System role not supported")
            finally:
                s.close()


if __name__ == "__main__":
    SERVER = sys.argv.pop(1)
    LOADGEN = sys.argv.pop(1)
    # Bazel ends a test past its timeout with SIGTERM: print where each thread was.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    unittest.main()
