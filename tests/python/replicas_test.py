#!/usr/bin/env python3
"""Data-parallel replicas: two real flover_server processes behind gRPC's
client-side round_robin, and behind a real nginx (grpc_pass) on loopback.
The load client's Poisson load is spread over both, each output equals the
one a single server gives the same request, and with retries a draining
replica (SIGTERM) costs no request."""
import faulthandler
import json
import os
import signal
import socket
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
NGINX = "/usr/sbin/nginx"


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx in the foreground on a free loopback port, proxying gRPC to
    `upstreams` round-robin, with every path it writes inside `d`."""

    def __init__(self, d, upstreams):
        self.address = f"127.0.0.1:{free_port()}"
        temp = "\n".join(f"  {k}_temp_path {d}/{k};"
                         for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        servers = " ".join(f"server {u};" for u in upstreams)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
pid {d}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
{temp}
  upstream flover {{ {servers} }}
  server {{
    listen {self.address} http2;
    location / {{ grpc_pass grpc://flover; grpc_read_timeout 600s; grpc_send_timeout 600s; }}
  }}
}}
""")
        self.proc = subprocess.Popen([NGINX, "-p", d, "-e", "stderr", "-c", conf, "-g",
                                      "daemon off;"], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", int(self.address.split(":")[1]))) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"nginx did not start: {self.proc.stderr.read() if self.proc.poll() is not None else ''}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc.stderr.close()


def loadgen(target, *flags):
    out = subprocess.run([LOADGEN, f"--target={target}", "--progress=false", *flags],
                         capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout + out.stderr


class ReplicasTest(unittest.TestCase):
    def test_round_robin_spreads_the_load_and_changes_no_output(self):
        self.spread_the_load(through_nginx=False)

    def test_nginx_spreads_the_load_and_changes_no_output(self):
        self.spread_the_load(through_nginx=True)

    def test_retries_carry_requests_past_a_draining_replica(self):
        self.drain_one(through_nginx=False)

    def test_retries_through_nginx_carry_requests_past_a_draining_replica(self):
        self.drain_one(through_nginx=True)

    def spread_the_load(self, through_nginx):
        a, a_addr = start("--model=builtin:tiny", "--max_batch=8", "--threads=1")
        b, b_addr = start("--model=builtin:tiny", "--max_batch=8", "--threads=1")
        nginx = None
        try:
            plan = ["--rate=100", "--num_requests=40", "--prompt_len=uniform:1:12",
                    "--output_len=uniform:1:16", "--seed=9", "--temperature=1", "--ignore_eos"]
            with tempfile.TemporaryDirectory() as d:
                target = f"{a_addr},{b_addr}"
                if through_nginx:
                    nginx = Nginx(d, [a_addr, b_addr])
                    target = nginx.address
                code, out = loadgen(target, *plan, f"--dump_outputs={d}/rr.jsonl")
                self.assertEqual(code, 0, out)
                served = [FloverClient(x).stats().requests_submitted for x in (a_addr, b_addr)]
                self.assertEqual(sum(served), 40)
                self.assertGreater(min(served), 0, served)  # both replicas served
                code, out = loadgen(a_addr, *plan, f"--dump_outputs={d}/one.jsonl")
                self.assertEqual(code, 0, out)
                with open(f"{d}/rr.jsonl") as f, open(f"{d}/one.jsonl") as g:
                    self.assertEqual(f.read(), g.read())
                if not through_nginx:
                    # The Python client balances the same way over a list.
                    # round_robin picks among connected replicas, so the
                    # first calls may all go to whichever connected first
                    # (on a fast server, ten calls can finish before the
                    # other connects): call until both served one, up to a
                    # bound far past any connection time.
                    before = [FloverClient(x).stats().requests_submitted for x in (a_addr, b_addr)]
                    client = FloverClient([a_addr, b_addr])
                    sent, calls = 0, [0, 0]
                    while min(calls) == 0 and sent < 2000:
                        list(client.generate(token_ids=[1, 2], max_new_tokens=2))
                        sent += 1
                        if sent % 10 == 0 or sent < 10:
                            after = [FloverClient(x).stats().requests_submitted for x in (a_addr, b_addr)]
                            calls = [x - y for x, y in zip(after, before)]
                    after = [FloverClient(x).stats().requests_submitted for x in (a_addr, b_addr)]
                    calls = [x - y for x, y in zip(after, before)]
                    self.assertEqual(sum(calls), sent)
                    self.assertGreater(min(calls), 0, calls)
                if nginx is not None:
                    nginx.close()
        finally:
            if nginx is not None and nginx.proc.poll() is None:
                nginx.close()
            stop(a)
            stop(b)

    def drain_one(self, through_nginx):
        # B drains a long request (GPT-2-small shapes, 1000 tokens: many
        # seconds here) and refuses new ones with UNAVAILABLE meanwhile; the
        # request is cancelled once the checks are done, which ends B's drain.
        nginx = None
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
            # One request in flight at a time, so the round-robin picks
            # (the client's, or nginx's single worker's) alternate and a
            # request B refuses is retried on A.
            plan = ["--rate=inf", "--num_requests=12", "--prompt_len=4", "--output_len=2",
                    "--max_concurrency=1", "--temperature=0", "--ignore_eos"]
            with tempfile.TemporaryDirectory() as d:
                target = f"{a_addr},{b_addr}"
                if through_nginx:
                    nginx = Nginx(d, [a_addr, b_addr])
                    target = nginx.address
                code, out = loadgen(target, *plan)
                self.assertNotEqual(code, 0, out)  # without retries, B's refusals are failures
                self.assertIn("UNAVAILABLE", out)
                code, out = loadgen(target, *plan, "--retries=2")
                self.assertEqual(code, 0, out)
                self.assertIn("completed 12, failed 0", out)
                if nginx is not None:
                    nginx.close()
            self.assertIsNone(b.poll(), "B stopped draining before the checks ran")
            self.assertGreater(len(first.token_ids), 0)
            long_stream.cancel()
            self.assertEqual(b.wait(timeout=60), 0)
        finally:
            if nginx is not None and nginx.proc.poll() is None:
                nginx.close()
            stop(a)
            stop(b)


if __name__ == "__main__":
    SERVER = sys.argv.pop(1)
    LOADGEN = sys.argv.pop(1)
    # Bazel ends a test past its timeout with SIGTERM: print where each thread was.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    unittest.main()
