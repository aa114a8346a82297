#!/usr/bin/env python3
"""The Python client package against the real flover_server on loopback, plus
the standard grpc.health.v1 and reflection services (spoken as raw protobuf
bytes: Debian ships no Python modules for them), and the committed stubs
being up to date with proto/flover.proto."""
import faulthandler
import filecmp
import os
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.getcwd(), "clients", "python"))
import grpc  # noqa: E402

from flover_client import FloverClient, flover_pb2  # noqa: E402

SERVER = None

HEALTH_SERVING = b"\x08\x01"
HEALTH_NOT_SERVING = b"\x08\x02"


def start_server(*flags):
    proc = subprocess.Popen([SERVER, "--listen=127.0.0.1:0", *flags],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    return proc, line[len("listening on "):]


def health(channel):
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
    return check(b"", timeout=5)


class PythonClientTest(unittest.TestCase):
    def test_choices_penalties_bias_and_min_p(self):
        proc, address = start_server("--model=tests/golden/tiny_f32", "--max_seq_len=40",
                                     "--threads=2")
        try:
            client = FloverClient(address)
            for seed in range(4):
                msgs = list(client.generate(prompt="Hello", max_new_tokens=20, temperature=1.5,
                                            seed=seed, choice=["yes", "no", "Hello there"]))
                self.assertIn("".join(m.text for m in msgs), ["yes", "no", "Hello there"])
                self.assertEqual(msgs[-1].finish_reason, flover_pb2.STOP)
            # A bias of -100 on the greedy choice moves greedy off it.
            greedy = list(client.generate(token_ids=[1, 2, 3], max_new_tokens=1, temperature=0,
                                          ignore_eos=True))[0].token_ids[0]
            moved = list(client.generate(token_ids=[1, 2, 3], max_new_tokens=1, temperature=0,
                                         ignore_eos=True, logit_bias={greedy: -100.0}))
            self.assertNotEqual(moved[0].token_ids[0], greedy)
            # Penalties and min-p run; out of range is refused by name.
            msgs = list(client.generate(token_ids=[1, 2, 3], max_new_tokens=8, temperature=1.0,
                                        seed=1, ignore_eos=True, presence_penalty=1.0,
                                        frequency_penalty=0.5, min_p=0.05))
            self.assertEqual(sum(len(m.token_ids) for m in msgs), 8)
            for kw, field in ((dict(presence_penalty=3.0), "presence_penalty"),
                              (dict(min_p=2.0), "min_p"),
                              (dict(logit_bias={999999: 1.0}), "logit_bias"),
                              (dict(choice=[]), "choice")):
                with self.assertRaises(grpc.RpcError) as err:
                    list(client.generate(token_ids=[1], max_new_tokens=2, **kw))
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, kw)
                self.assertIn(field, err.exception.details(), kw)
        finally:
            proc.kill()
            proc.wait()

    def test_stubs_are_up_to_date(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run(["tools/gen_python_client.sh", d], check=True)
            for name in ("flover_pb2.py", "flover_pb2_grpc.py"):
                self.assertTrue(filecmp.cmp(os.path.join(d, name),
                                            os.path.join("clients/python/flover_client", name),
                                            shallow=False), f"{name} is stale: run tools/gen_python_client.sh")

    def test_generate_errors_health_reflection_and_drain(self):
        # GPT-2-small shapes: the drain below lasts long enough (~0.5 s) to
        # watch health change while a request is still running. The drain
        # timeout is only an upper bound (the default 30 s cut the request
        # under ThreadSanitizer).
        proc, address = start_server("--model=builtin:gpt2-small", "--max_seq_len=128",
                                     "--max_batch=2", "--threads=2", "--drain_timeout_s=600")
        try:
            client = FloverClient(address)
            info = client.model_info()
            self.assertEqual(info.vocab_size, 50257)
            msgs = list(client.generate(token_ids=[1, 2, 3], max_new_tokens=10, temperature=0,
                                        ignore_eos=True, request_id="py-1"))
            self.assertEqual(sum(len(m.token_ids) for m in msgs), 10)
            self.assertEqual(msgs[-1].finish_reason, flover_pb2.LENGTH)
            self.assertEqual(msgs[-1].usage.generated_tokens, 10)
            self.assertTrue(all(m.request_id == "py-1" for m in msgs))

            with self.assertRaises(grpc.RpcError) as err:
                list(client.generate(token_ids=[1], max_new_tokens=4, top_p=0))
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("top_p", err.exception.details())

            self.assertEqual(health(client.channel), HEALTH_SERVING)
            reflect = client.channel.stream_stream(
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                request_serializer=lambda b: b, response_deserializer=lambda b: b)
            # ServerReflectionRequest{list_services: ""} is field 7, empty string.
            replies = list(reflect(iter([b"\x3a\x00"]), timeout=5))
            self.assertIn(b"flover.v1.Flover", replies[0])
            self.assertIn(b"grpc.health.v1.Health", replies[0])

            # Drain: a long request keeps running while health says NOT_SERVING.
            stream = client.generate(token_ids=[4, 5], max_new_tokens=40, temperature=0, ignore_eos=True)
            first = next(stream)
            proc.send_signal(signal.SIGTERM)
            # Poll until the signal has been taken: a count of polls raced it
            # on a fast machine. Health never flipping ends in Bazel's
            # timeout; the server stopping first ends in an RpcError here.
            while health(client.channel) != HEALTH_NOT_SERVING:
                pass
            rest = list(stream)
            self.assertEqual(len(first.token_ids) + sum(len(m.token_ids) for m in rest), 40)
            self.assertEqual(rest[-1].finish_reason, flover_pb2.LENGTH)
            self.assertEqual(proc.wait(timeout=600), 0)
        finally:
            if proc.poll() is None:
                proc.kill()


if __name__ == "__main__":
    SERVER = sys.argv.pop(1)
    # Bazel ends a test past its timeout with SIGTERM: print where each thread was.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    unittest.main()
