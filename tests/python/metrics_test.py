#!/usr/bin/env python3
"""Prometheus metrics of the real flover_server on loopback: the counts and
histograms move exactly as the requests that ran say they must, Prometheus'
own `promtool check metrics` accepts the exposition, and a real Prometheus
server scrapes it and answers a rate query."""
import faulthandler
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.getcwd(), "clients", "python"))
import grpc  # noqa: E402

from flover_client import FloverClient, flover_pb2  # noqa: E402

SERVER = None
PROMTOOL = "/usr/bin/promtool"
PROMETHEUS = "/usr/bin/prometheus"

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def start_server(*flags):
    proc = subprocess.Popen([SERVER, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", *flags],
                            stdout=subprocess.PIPE, text=True)
    grpc_line = proc.stdout.readline().strip()
    metrics_line = proc.stdout.readline().strip()
    assert grpc_line.startswith("listening on "), grpc_line
    assert metrics_line.startswith("metrics on "), metrics_line
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    return proc, grpc_line[len("listening on "):], metrics_line[len("metrics on "):]


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        return r.read().decode()


def parse(text):
    """{(name, ((label, value), ...)): value} for every sample line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = tuple(sorted(LABEL.findall(m.group(3) or "")))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MetricsTest(unittest.TestCase):
    def test_metrics_count_what_ran_and_promtool_accepts_them(self):
        proc, address, url = start_server("--model=builtin:tiny", "--max_batch=4", "--threads=2")
        try:
            before = parse(scrape(url))
            self.assertEqual(value(before, "flover_requests_submitted_total"), 0)
            info = [k for k in before if k[0] == "flover_model_info"]
            self.assertEqual(len(info), 1)
            self.assertIn(("model", "builtin:tiny"), info[0][1])
            self.assertIn(("scheduler", "fusion"), info[0][1])
            self.assertIn(("device", "cpu"), info[0][1])
            self.assertEqual(value(before, "flover_kv_cache_used_bytes"), 0)

            client = FloverClient(address)
            # Eight requests at once, at most four running: some queue, all fuse.
            prompts = [[1 + i] * (3 + 2 * i) for i in range(8)]
            new_tokens = 5
            results = [None] * len(prompts)

            def run(i):
                results[i] = list(client.generate(token_ids=prompts[i], max_new_tokens=new_tokens,
                                                  temperature=0, ignore_eos=True))
            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for r in results:
                self.assertEqual(r[-1].finish_reason, flover_pb2.LENGTH)
            # One 40-token prompt twice, one after the other: the second finds
            # the first's whole block (32 tokens) in the prefix cache, and
            # answers the same.
            repeated = list(range(100, 140))
            answers = [list(client.generate(token_ids=repeated, max_new_tokens=new_tokens,
                                            temperature=0, ignore_eos=True)) for _ in range(2)]
            tokens = [[t for r in a for t in r.token_ids] for a in answers]
            self.assertEqual(len(tokens[0]), new_tokens)
            self.assertEqual(tokens[0], tokens[1])
            self.assertEqual(answers[1][-1].usage.prompt_tokens, len(repeated))
            prompts += [repeated, repeated]
            # Refused by the engine (max_new_tokens) and by the front end (a
            # text prompt without a tokenizer): counted, never queued.
            for bad in (dict(token_ids=[1], max_new_tokens=10**6), dict(prompt="hello")):
                with self.assertRaises(grpc.RpcError) as err:
                    list(client.generate(**bad))
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

            m = parse(scrape(url))
            n, prompt_tokens = len(prompts), sum(len(p) for p in prompts)
            hits = 32
            computed = prompt_tokens - hits  # prompt tokens the model ran
            generated = n * new_tokens
            self.assertEqual(value(m, "flover_requests_submitted_total"), n)
            self.assertEqual(value(m, "flover_requests_finished_total", reason="length"), n)
            for reason in ("stop", "eos", "cancelled", "deadline", "error"):
                self.assertEqual(value(m, "flover_requests_finished_total", reason=reason), 0)
            self.assertEqual(value(m, "flover_request_errors_total", code="invalid_argument"), 2)
            self.assertEqual(value(m, "flover_request_errors_total", code="resource_exhausted"), 0)
            self.assertEqual(value(m, "flover_prompt_tokens_total"), computed)
            # Every prompt queried the prefix cache for all its tokens but the
            # last (which must run to give logits).
            self.assertEqual(value(m, "flover_prefix_cache_queries_total"), prompt_tokens - n)
            self.assertEqual(value(m, "flover_prefix_cache_hits_total"), hits)
            self.assertEqual(value(m, "flover_preemptions_total"), 0)
            self.assertEqual(value(m, "flover_generated_tokens_total"), generated)

            # One observation per request, and one per token gap.
            for h in ("flover_request_queue_time_seconds", "flover_time_to_first_token_seconds",
                      "flover_time_per_output_token_seconds", "flover_request_e2e_latency_seconds"):
                self.assertEqual(value(m, h + "_count"), n, h)
                self.assertEqual(value(m, h + "_bucket", le="+Inf"), n, h)
                self.assertGreater(value(m, h + "_sum"), 0, h)
            self.assertEqual(value(m, "flover_inter_token_latency_seconds_count"), n * (new_tokens - 1))
            # TTFT <= e2e for every request, so their sums are ordered too.
            self.assertLessEqual(value(m, "flover_time_to_first_token_seconds_sum"),
                                 value(m, "flover_request_e2e_latency_seconds_sum"))

            # Every row of every step is a prompt token or a generated token
            # fed back (the last token of each request never is).
            steps = value(m, "flover_steps_total")
            self.assertEqual(value(m, "flover_step_rows_count"), steps)
            self.assertEqual(value(m, "flover_step_duration_seconds_count"), steps)
            self.assertEqual(value(m, "flover_step_sampling_seconds_count"), steps)
            self.assertGreater(value(m, "flover_step_sampling_seconds_sum"), 0)
            self.assertEqual(value(m, "flover_step_rows_sum"), computed + n * (new_tokens - 1))
            self.assertEqual(value(m, "flover_step_prompt_tokens_sum"), computed)
            # Fusion happened: fewer steps than the requests would take one by one.
            self.assertLess(steps, n * new_tokens)

            for g in ("flover_requests_running", "flover_requests_waiting",
                      "flover_kv_cache_used_bytes"):
                self.assertEqual(value(m, g), 0, g)
            # What finished stays cached for reuse: at least the repeated block.
            self.assertGreater(value(m, "flover_kv_cache_cached_bytes"), 0)
            self.assertGreater(value(m, "flover_kv_cache_capacity_bytes"),
                               value(m, "flover_kv_cache_cached_bytes"))
            # The same counts as the gRPC stats.
            stats = client.stats()
            self.assertEqual(stats.tokens_generated, generated)
            self.assertEqual(stats.prompt_tokens, computed)
            self.assertEqual(stats.prefix_cache_hit_tokens, hits)
            self.assertEqual(stats.prefix_cache_query_tokens, prompt_tokens - n)
            self.assertEqual(stats.kv_bytes_cached, value(m, "flover_kv_cache_cached_bytes"))
            self.assertEqual(stats.max_running, 4)
            self.assertEqual(stats.steps, steps)
            self.assertEqual(stats.kv_bytes_total, value(m, "flover_kv_cache_capacity_bytes"))
            # K and V of one position in every layer, f32: the model's shape says how many.
            mi = client.model_info()
            per_token = mi.n_layer * 2 * mi.n_kv_head * (mi.n_embd // mi.n_head) * 4
            self.assertEqual(value(m, "flover_kv_cache_bytes_per_token"), per_token)
            self.assertEqual(mi.kv_cache_bytes_per_token, per_token)

            check = subprocess.run([PROMTOOL, "check", "metrics"], input=scrape(url),
                                   capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()

    def test_prometheus_scrapes_the_server_and_answers_a_rate(self):
        proc, address, url = start_server("--model=builtin:tiny", "--max_batch=4", "--threads=1")
        prom = None
        stop = threading.Event()
        try:
            with tempfile.TemporaryDirectory() as d:
                target = urllib.parse.urlparse(url).netloc
                config = os.path.join(d, "prometheus.yml")
                with open(config, "w") as f:
                    f.write("global:\n  scrape_interval: 1s\n"
                            "scrape_configs:\n  - job_name: flover\n"
                            f"    static_configs:\n      - targets: ['{target}']\n")
                web = f"127.0.0.1:{free_port()}"
                prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                                         f"--storage.tsdb.path={d}/data", f"--web.listen-address={web}",
                                         "--log.level=warn"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                client = FloverClient(address)

                def load():
                    while not stop.is_set():
                        list(client.generate(token_ids=[1, 2, 3], max_new_tokens=8, temperature=0,
                                             ignore_eos=True))
                worker = threading.Thread(target=load)
                worker.start()

                def query(q):
                    u = f"http://{web}/api/v1/query?" + urllib.parse.urlencode({"query": q})
                    try:
                        with urllib.request.urlopen(u, timeout=5) as r:
                            return json.load(r)["data"]["result"]
                    except OSError:
                        return []  # not up yet
                # Polls until Prometheus holds two scrapes that show tokens
                # being generated; bounded so a broken setup fails, not hangs.
                rate, up = [], []
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and prom.poll() is None:
                    rate = query('rate(flover_generated_tokens_total{job="flover"}[10s])')
                    if rate and float(rate[0]["value"][1]) > 0:
                        up = query('up{job="flover"}')
                        break
                    time.sleep(0.5)
                self.assertIsNone(prom.poll(), prom.stderr.read() if prom.poll() is not None else "")
                self.assertTrue(rate, "Prometheus never answered the rate query")
                self.assertGreater(float(rate[0]["value"][1]), 0)
                self.assertEqual(up[0]["value"][1], "1")
                stop.set()
                worker.join()
                prom.terminate()
                prom.wait(timeout=30)
        finally:
            stop.set()
            if prom is not None:
                if prom.poll() is None:
                    prom.kill()
                    prom.wait()
                prom.stderr.close()
            proc.kill()
            proc.wait()
            proc.stdout.close()

    def test_bad_metrics_address_is_refused_with_the_flag_named(self):
        for flag, says in (("--metrics_listen=nonsense", "--metrics_listen"),
                           ("--metrics_listen=127.0.0.1:99999", "--metrics_listen")):
            r = subprocess.run([SERVER, "--model=builtin:tiny", "--listen=127.0.0.1:0", flag],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(says, r.stderr)
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            r = subprocess.run([SERVER, "--model=builtin:tiny", "--listen=127.0.0.1:0",
                                f"--metrics_listen=127.0.0.1:{port}"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(f"--metrics_listen: cannot listen on 127.0.0.1:{port}", r.stderr)


if __name__ == "__main__":
    SERVER = sys.argv.pop(1)
    # Bazel ends a test past its timeout with SIGTERM: print where each thread was.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    unittest.main()
