#!/usr/bin/env python3
"""Data-parallel replicas with gRPC's client-side round_robin: the load
client spreads a Poisson load over two real flover_server processes, each
output equals the one a single server gives the same request, and with
retries a draining replica (SIGTERM) costs no request."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.getcwd(), "clients", "python"))
from flover_client import FloverClient  # noqa: E402

SERVER = None
LOADGEN = None


def start(*flags):
    proc = subprocess.Popen([SERVER, "--listen=127.0.0.1:0", *flags], stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, line[len("listening on "):]


def stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stdout.close()


def loadgen(target, *flags):
    out = subprocess.run([LOADGEN, f"--target={target}", "--progress=false", *flags],
                         capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout + out.stderr


class ReplicasTest(unittest.TestCase):
    def test_round_robin_spreads_the_load_and_changes_no_output(self):
        a, a_addr = start("--model=builtin:tiny", "--max_batch=8", "--threads=1")
        b, b_addr = start("--model=builtin:tiny", "--max_batch=8", "--threads=1")
        try:
            plan = ["--rate=100", "--num_requests=40", "--prompt_len=uniform:1:12",
                    "--output_len=uniform:1:16", "--seed=9", "--temperature=1", "--ignore_eos"]
            with tempfile.TemporaryDirectory() as d:
                code, out = loadgen(f"{a_addr},{b_addr}", *plan, f"--dump_outputs={d}/rr.jsonl")
                self.assertEqual(code, 0, out)
                served = [FloverClient(x).stats().requests_submitted for x in (a_addr, b_addr)]
                self.assertEqual(sum(served), 40)
                self.assertGreater(min(served), 0, served)  # both replicas served
                code, out = loadgen(a_addr, *plan, f"--dump_outputs={d}/one.jsonl")
                self.assertEqual(code, 0, out)
                with open(f"{d}/rr.jsonl") as f, open(f"{d}/one.jsonl") as g:
                    self.assertEqual(f.read(), g.read())
        finally:
            stop(a)
            stop(b)

    def test_retries_carry_requests_past_a_draining_replica(self):
        # B drains a long request (GPT-2-small shapes, 1000 tokens: many
        # seconds here) and refuses new ones with UNAVAILABLE meanwhile; the
        # request is cancelled once the checks are done, which ends B's drain.
        a, a_addr = start("--model=builtin:gpt2-small", "--max_seq_len=1024", "--max_batch=4",
                          "--threads=1")
        b, b_addr = start("--model=builtin:gpt2-small", "--max_seq_len=1024", "--max_batch=4",
                          "--threads=1", "--drain_timeout_s=600")
        try:
            b_client = FloverClient(b_addr)
            long_stream = b_client.generate(token_ids=[1, 2, 3], max_new_tokens=1000,
                                            temperature=0, ignore_eos=True)
            first = next(long_stream)
            b.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until B refuses new requests
                try:
                    list(b_client.generate(token_ids=[1], max_new_tokens=1))
                except Exception as e:  # noqa: BLE001 - grpc.RpcError
                    if "shutting down" in str(e):
                        break
                time.sleep(0.05)
            # One request in flight at a time, so round_robin's picks alternate
            # and a request B refuses is retried on A.
            plan = ["--rate=inf", "--num_requests=12", "--prompt_len=4", "--output_len=2",
                    "--max_concurrency=1", "--temperature=0", "--ignore_eos"]
            code, out = loadgen(f"{a_addr},{b_addr}", *plan)
            self.assertNotEqual(code, 0, out)  # without retries, B's refusals are failures
            self.assertIn("UNAVAILABLE", out)
            code, out = loadgen(f"{a_addr},{b_addr}", *plan, "--retries=2")
            self.assertEqual(code, 0, out)
            self.assertIn("completed 12, failed 0", out)
            self.assertIsNone(b.poll(), "B stopped draining before the checks ran")
            self.assertGreater(len(first.token_ids), 0)
            long_stream.cancel()
            self.assertEqual(b.wait(timeout=60), 0)
        finally:
            stop(a)
            stop(b)


if __name__ == "__main__":
    SERVER = sys.argv.pop(1)
    LOADGEN = sys.argv.pop(1)
    unittest.main()
