#!/usr/bin/env python3
"""Constrained against unconstrained decoding on one flover_server: a burst
of C chats at once (C = 16 and 64 by default), each asking for a JSON
object, sent once with `response_format` json_schema (a small schema:
strings, a bounded integer, a boolean, an enum, an array of at most 3
strings) and once without, greedy, `max_tokens` fixed. Prints output
tokens/s and wall time for both and their ratio (the two modes' answers
differ in length, so this is a coarse measure of the mask's cost), the share
of constrained answers that finished within max_tokens (all of those must
parse and validate; any that do not are reported), and the compile time of a schema the
server has not seen (first request with it, less the same request once
cached, at max_tokens=1). Rounds alternate the two modes; medians.

Because the two modes write different answers, the server's own step
metrics say what the constraint costs for the same work: per generated
token, the forward time (flover_step_duration_seconds) and the sampling time
(flover_step_sampling_seconds: logits processors, the constraint's mask and
advance, the draw), read from /metrics around each burst. With the forward
time per token F of the constrained bursts and the sampling time per token
S of each mode, (F + S_free) / (F + S_json) is the throughput ratio the
constraint leaves for answers of equal length.

    tools/bazelw build //server:flover_server
    .venv-test/bin/python benchmarks/structured_outputs.py \\
        [--model=models/SmolLM2-135M-Instruct.Q4_1.gguf] [--concurrency=16,64] \\
        [--max_tokens=96] [--rounds=3] [--threads=2]

With --llama_server=BIN, llama.cpp's llama-server serves the same file
(one slot per chat of the largest burst, --jinja for its chat template) and
takes the same constrained bursts, alternating with Flover's in each round:
its json_schema (its own GBNF conversion) against Flover's.

The client (the official `openai` package, AsyncOpenAI) runs on the same
cores as the server."""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

import openai

from chat_serving import free_port, wait_ready  # this folder's llama-server helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, ".bazel-root/bin/server/flover_server")

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "country": {"type": "string"},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 100},
        "is_capital": {"type": "boolean"},
        "climate": {"enum": ["cold", "mild", "hot"]},
        "landmarks": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["city", "country", "population_millions", "is_capital", "climate", "landmarks"],
    "additionalProperties": False,
}
CITIES = ["Paris", "Tokyo", "Cairo", "Lima", "Oslo", "Delhi", "Rome", "Seoul", "Quito", "Accra",
          "Hanoi", "Dakar", "Bern", "Riga", "Kyiv", "Doha"]


def valid(obj):
    p = SCHEMA["properties"]
    return (isinstance(obj, dict) and set(obj) == set(p) and isinstance(obj["city"], str)
            and isinstance(obj["country"], str) and isinstance(obj["population_millions"], int)
            and 0 <= obj["population_millions"] <= 100 and isinstance(obj["is_capital"], bool)
            and obj["climate"] in p["climate"]["enum"] and isinstance(obj["landmarks"], list)
            and len(obj["landmarks"]) <= 3 and all(isinstance(x, str) for x in obj["landmarks"]))


def start(args):
    proc = subprocess.Popen([SERVER, f"--model={args.model}", "--listen=127.0.0.1:0",
                             "--http_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                             f"--threads={args.threads}",
                             f"--max_batch={max(args.concurrency)}", "--max_seq_len=512"],
                            stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    metrics = proc.stdout.readline().strip()
    assert metrics.startswith("metrics on "), metrics
    http = proc.stdout.readline().strip()
    assert http.startswith("openai api on "), http
    return proc, http[len("openai api on "):], metrics[len("metrics on "):]


def start_llama_server(args):
    port = free_port()
    slots = max(args.concurrency)
    proc = subprocess.Popen([args.llama_server, "-m", args.model, "-t", str(args.threads), "-np", str(slots),
                             "-c", str(slots * 512), "--port", str(port), "--host", "127.0.0.1", "--jinja"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc)
    return proc, url + "/v1"


def engine_seconds(metrics_url):
    """Sums of the server's step metrics: forward seconds, sampling seconds, steps."""
    text = urllib.request.urlopen(metrics_url, timeout=60).read().decode()
    want = {"flover_step_duration_seconds_sum": 0.0, "flover_step_sampling_seconds_sum": 0.0,
            "flover_steps_total": 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in want:
            want[name] = float(value)
    return [want[k] for k in ("flover_step_duration_seconds_sum", "flover_step_sampling_seconds_sum",
                              "flover_steps_total")]


async def burst(client, model, n, max_tokens, constrained, extra=None):
    async def one(i):
        kw = {}
        if constrained:
            kw["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "city", "schema": SCHEMA}}
            if extra:
                kw["extra_body"] = extra
        r = await client.chat.completions.create(
            model=model, max_tokens=max_tokens, temperature=0,
            messages=[{"role": "user", "content": f"Describe {CITIES[i % len(CITIES)]} as JSON: "
                       "city, country, population in millions, capital or not, climate, "
                       "up to three landmarks."}], **kw)
        return r
    start = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - start
    tokens = sum(r.usage.completion_tokens for r in results)
    ok = stopped = 0
    for r in results:
        if not constrained or r.choices[0].finish_reason != "stop":
            continue
        stopped += 1
        try:
            ok += valid(json.loads(r.choices[0].message.content))
        except ValueError:
            pass
    if stopped != ok:
        print(f"!! {stopped - ok} of {stopped} finished constrained answers do not validate")
    return wall, tokens, ok


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--concurrency", default="16,64")
    parser.add_argument("--max_tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llama_server", help="llama.cpp's llama-server binary: the peer, same file")
    parser.add_argument("--extra", default="",
                        help='JSON merged into each constrained request to Flover, e.g. '
                             '\'{"max_string_length": 64, "max_string_repeats": 4}\' (string limits)')
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    proc, base, metrics_url = start(args)
    try:
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600)
        model = (await client.models.list()).data[0].id
        extra = json.loads(args.extra) if args.extra else None
        await burst(client, model, 4, 8, True, extra)  # warm-up (compiles the schema once)
        print(f"# {os.path.basename(args.model)}, max_tokens {args.max_tokens}, greedy, "
              f"{args.threads} threads, {args.rounds} rounds (medians)")
        print("| concurrency | unconstrained tok/s | constrained tok/s | ratio | "
              "constrained: finished and valid | wall s (free / json) |")
        print("|---:|---:|---:|---:|---:|---:|")
        step_rows = []
        for c in args.concurrency:
            free, json_ = [], []
            valid_share = []
            # Per mode: forward and sampling seconds and steps, generated tokens.
            engine = {False: [0.0, 0.0, 0.0, 0], True: [0.0, 0.0, 0.0, 0]}
            for round_ in range(args.rounds):
                for constrained in ((False, True) if round_ % 2 == 0 else (True, False)):
                    before = engine_seconds(metrics_url)
                    wall, tokens, ok = await burst(client, model, c, args.max_tokens, constrained, extra)
                    after = engine_seconds(metrics_url)
                    for k in range(3):
                        engine[constrained][k] += after[k] - before[k]
                    engine[constrained][3] += tokens
                    (json_ if constrained else free).append((tokens / wall, wall))
                    if constrained:
                        valid_share.append(ok / c)
            step_rows.append((c, engine))
            f = statistics.median(t for t, _ in free)
            j = statistics.median(t for t, _ in json_)
            print(f"| {c} | {f:.0f} | {j:.0f} | {j / f:.2f} | {statistics.median(valid_share):.0%} | "
                  f"{statistics.median(w for _, w in free):.1f} / "
                  f"{statistics.median(w for _, w in json_):.1f} |", flush=True)
        print("\nThe server's step metrics, per generated token (all rounds):\n")
        print("| concurrency | forward µs/token (free / json) | sampling µs/token (free / json) | "
              "sampling share of the step (json) | ratio for equal answers |")
        print("|---:|---:|---:|---:|---:|")
        for c, engine in step_rows:
            (ff, sf, _, tf), (fj, sj, _, tj) = engine[False], engine[True]
            per = lambda x, t: x / t * 1e6  # noqa: E731
            print(f"| {c} | {per(ff, tf):.0f} / {per(fj, tj):.0f} | {per(sf, tf):.1f} / {per(sj, tj):.1f} | "
                  f"{sj / (fj + sj):.1%} | {(per(fj, tj) + per(sf, tf)) / (per(fj, tj) + per(sj, tj)):.3f} |",
                  flush=True)
        # Compile time: a schema never seen (a fresh property name) against
        # the same request once it is cached.
        compile_ms = []
        for k in range(5):
            schema = dict(SCHEMA, properties=dict(SCHEMA["properties"], **{f"extra{k}_{time.time_ns()}": {"type": "string"}}))
            kw = dict(model=model, max_tokens=1, messages=[{"role": "user", "content": "x"}],
                      response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
            t0 = time.perf_counter()
            await client.chat.completions.create(**kw)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            await client.chat.completions.create(**kw)
            again = time.perf_counter() - t0
            compile_ms.append((first - again) * 1e3)
        print(f"\ncompile time of a new schema (first request less a cached one, median of 5): "
              f"{statistics.median(compile_ms):.1f} ms")
        if args.llama_server:
            await peer(args, client, model)
    finally:
        proc.terminate()
        proc.wait()


async def peer(args, flover, flover_model):
    """The constrained bursts on llama-server beside Flover's, alternating."""
    proc, base = start_llama_server(args)
    try:
        llama = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600)
        llama_model = (await llama.models.list()).data[0].id
        await burst(llama, llama_model, 4, 8, True)  # warm-up
        print("\nllama-server beside Flover, both constrained (json_schema), same bursts:\n")
        print("| concurrency | Flover tok/s | llama-server tok/s | ratio | finished and valid (Flover / llama-server) |")
        print("|---:|---:|---:|---:|---:|")
        for c in args.concurrency:
            ours, theirs, ours_ok, theirs_ok = [], [], [], []
            for round_ in range(args.rounds):
                order = ((flover, flover_model, ours, ours_ok), (llama, llama_model, theirs, theirs_ok))
                for client, model, out, ok_out in (order if round_ % 2 == 0 else order[::-1]):
                    wall, tokens, ok = await burst(client, model, c, args.max_tokens, True)
                    out.append(tokens / wall)
                    ok_out.append(ok / c)
            f, l_ = statistics.median(ours), statistics.median(theirs)
            print(f"| {c} | {f:.0f} | {l_:.0f} | {f / l_:.2f} | "
                  f"{statistics.median(ours_ok):.0%} / {statistics.median(theirs_ok):.0%} |", flush=True)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
