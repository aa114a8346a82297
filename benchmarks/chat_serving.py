#!/usr/bin/env python3
"""llama-server beside flover_server on one GGUF file, through the OpenAI
API's streamed /v1/chat/completions: a burst of chats (all at once) and
seeded Poisson arrivals, the same requests to both (tools/demo_chats.jsonl,
cycled; greedy; max_tokens fixed with ignore_eos, so both generate the same
number of tokens), the servers taking turns each round (order alternating).
Prints per program and workload: output tokens/s, requests/s, time to first
token and end-to-end latency (mean, p50, p90), medians over rounds.

    tools/bazelw build //server:flover_server
    .venv-test/bin/python benchmarks/chat_serving.py --llama_bin=$PERF/llama.cpp/build/bin \\
        --gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf [--rounds=3] [--threads=2] \\
        [--burst=32] [--rate=0 (= llama-server's burst request rate)] [--requests=48] \\
        [--max_tokens=128] [--flover_dtype=f32]

The client is the official `openai` package (AsyncOpenAI), one connection
per request; it runs on the same cores as the server, equally for both.
TTFT is the first chunk with text; tokens are the response's usage."""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    sys.exit(f"server at {url} not ready in {timeout_s} s")


def start(program, args, ctx):
    port = free_port()
    if program == "llama.cpp":
        cmd = [os.path.join(args.llama_bin, "llama-server"), "-m", args.gguf, "-t", str(args.threads),
               "-tb", str(args.threads), "-np", str(args.burst), "-c", str(args.burst * ctx),
               "--host", "127.0.0.1", "--port", str(port)]
    else:
        cmd = [os.path.join(ROOT, ".bazel-root/bin/server/flover_server"), f"--model={args.gguf}",
               f"--threads={args.threads}", f"--max_batch={args.burst}", f"--max_seq_len={ctx}",
               f"--dtype={args.flover_dtype}", "--listen=127.0.0.1:0",
               f"--http_listen=127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc)
    return proc, url


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def one(client, model, messages, max_tokens, sent_at):
    first = None
    tokens = 0
    stream = await client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = 0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            chunks += 1
            if first is None:
                first = time.monotonic()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    done = time.monotonic()
    return {"ttft": (first or done) - sent_at, "e2e": done - sent_at, "tokens": tokens or chunks}


async def workload(url, model, plan, max_tokens):
    """`plan`: (offset_s, messages) per request."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                timeout=3600)
    t0 = time.monotonic()

    async def at(offset, messages):
        await asyncio.sleep(max(0.0, t0 + offset - time.monotonic()))
        return await one(client, model, messages, max_tokens, time.monotonic())
    results = await asyncio.gather(*(at(o, m) for o, m in plan))
    duration = time.monotonic() - t0
    await client.close()
    return results, duration


def summary(results, duration):
    tokens = sum(r["tokens"] for r in results)
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else xs[0]  # noqa: E731
    ttft = [r["ttft"] * 1000 for r in results]
    e2e = [r["e2e"] for r in results]
    return {"tokens/s": tokens / duration, "requests/s": len(results) / duration,
            "TTFT mean ms": statistics.mean(ttft), "TTFT p50 ms": q(ttft, 50), "TTFT p90 ms": q(ttft, 90),
            "e2e mean s": statistics.mean(e2e), "e2e p50 s": q(e2e, 50), "e2e p90 s": q(e2e, 90),
            "tokens": tokens}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama_bin", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--burst", type=int, default=32)
    ap.add_argument("--rate", type=float, default=0,
                    help="Poisson arrivals per second; 0: llama-server's request rate in round 1's burst")
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--max_tokens", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=512, help="positions per sequence on both servers")
    ap.add_argument("--flover_dtype", default="f32")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    chats = []
    with open(os.path.join(ROOT, "tools", "demo_chats.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            chats.append(d["messages"] if "messages" in d else [{"role": "user", "content": d["prompt"]}])
    burst_plan = [(0.0, chats[i % len(chats)]) for i in range(args.burst)]
    got = {}  # (program, workload) -> [summary]
    rate = args.rate
    for r in range(args.rounds):
        order = ["llama.cpp", "flover"] if r % 2 == 0 else ["flover", "llama.cpp"]
        if rate == 0:
            order = ["llama.cpp", "flover"]  # the rate comes from llama-server's burst
        for program in order:
            proc, url = start(program, args, args.ctx)
            try:
                model = "x" if program == "llama.cpp" else os.path.basename(args.gguf)[:-5]
                asyncio.run(workload(url, model, burst_plan[:2], 8))  # warm-up
                res, dur = asyncio.run(workload(url, model, burst_plan, args.max_tokens))
                s = summary(res, dur)
                got.setdefault((program, "burst"), []).append(s)
                if rate == 0:
                    rate = round(s["requests/s"], 2)
                rng = random.Random(args.seed)
                t, plan = 0.0, []
                for i in range(args.requests):
                    t += rng.expovariate(rate)
                    plan.append((t, chats[i % len(chats)]))
                res, dur = asyncio.run(workload(url, model, plan, args.max_tokens))
                got.setdefault((program, "poisson"), []).append(summary(res, dur))
            finally:
                stop(proc)
            print(f"round {r + 1}: {program} done", file=sys.stderr, flush=True)
    med = lambda k, rows: statistics.median(x[k] for x in rows)  # noqa: E731
    print(f"{os.path.basename(args.gguf)}, {args.threads} threads, {args.burst} sequences at once, "
          f"{args.max_tokens} tokens per reply (ignore_eos), greedy; Flover --dtype={args.flover_dtype}; "
          f"medians of {args.rounds} rounds\n")
    keys = ["tokens/s", "requests/s", "TTFT mean ms", "TTFT p50 ms", "TTFT p90 ms", "e2e mean s",
            "e2e p50 s", "e2e p90 s"]
    for name, label in (("burst", f"burst of {args.burst} chats"),
                        ("poisson", f"Poisson, {rate:g} req/s, {args.requests} chats")):
        print(f"{label}:\n")
        print("| | " + " | ".join(keys) + " |")
        print("|---|" + "---:|" * len(keys))
        for program in ("llama.cpp", "flover"):
            rows = got.get((program, name))
            if rows:
                print(f"| {'llama-server' if program == 'llama.cpp' else 'flover_server'} | " +
                      " | ".join(f"{med(k, rows):.{2 if k.endswith(' s') else 1}f}" for k in keys) + " |")
        print()


if __name__ == "__main__":
    main()
