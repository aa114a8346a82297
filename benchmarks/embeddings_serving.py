#!/usr/bin/env python3
"""Embeddings served: llama-server --embeddings beside flover_server
--embeddings on one GGUF file, through OpenAI's /v1/embeddings. The same
passages go to both: N of them (seeded), each a random length in [MIN, MAX]
tokens of random ids (sent as token ids, so both embed the same tokens),
BATCH passages per request and CONCURRENCY requests in flight; last-token
pooling, normalised. The servers take turns each round (order alternating).
Prints passages/s and prompt tokens/s per program, medians over rounds, the
ratio, how closely the two programs' vectors agree (cosine of the same
passage), and the machine's roofline from model_benchmark on the same file.

    tools/bazelw build //server:flover_server //benchmarks:model_benchmark
    .venv-test/bin/python benchmarks/embeddings_serving.py --llama_bin=$PERF/llama.cpp/build/bin \\
        --gguf=FILE.gguf [--passages=256] [--min=128] [--max=512] [--batch=16] \\
        [--concurrency=4] [--rounds=2] [--threads=2] [--flover_dtype=native]

The client is the official `openai` package (AsyncOpenAI) on the same cores
as the server, equally for both."""
import argparse
import asyncio
import math
import os
import random
import statistics
import subprocess
import sys
import time

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_serving import ROOT, free_port, stop, wait_ready  # noqa: E402


def start(program, args):
    port = free_port()
    ctx = args.max + 16
    if program == "llama.cpp":
        # An embedding input must fit one micro-batch.
        cmd = [os.path.join(args.llama_bin, "llama-server"), "-m", args.gguf, "-t", str(args.threads),
               "-tb", str(args.threads), "--embeddings", "--pooling", "last", "-np", str(args.concurrency),
               "-c", str(args.concurrency * ctx), "-b", "2048", "-ub", str(ctx), "--host", "127.0.0.1",
               "--port", str(port)]
    else:
        cmd = [os.path.join(ROOT, ".bazel-root/bin/server/flover_server"), f"--model={args.gguf}",
               f"--threads={args.threads}", "--embeddings", "--pooling=last", f"--max_seq_len={ctx}",
               f"--max_batch={args.concurrency * args.batch}", f"--dtype={args.flover_dtype}",
               "--listen=127.0.0.1:0", f"--http_listen=127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc)
    return proc, url


async def workload(url, model, passages, batch, concurrency):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=3600)
    requests = [passages[i:i + batch] for i in range(0, len(passages), batch)]
    vectors = [None] * len(passages)
    queue = list(enumerate(requests))
    t0 = time.monotonic()

    async def worker():
        while queue:
            k, inputs = queue.pop(0)
            r = await client.embeddings.create(model=model, input=inputs)
            for d in r.data:
                vectors[k * batch + d.index] = d.embedding
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    duration = time.monotonic() - t0
    await client.close()
    return vectors, duration


def take_turns(rounds, start, run):
    """Each round, llama.cpp's server and Flover's, each started (start(program)
    -> (proc, url)), run (run(program, url) -> (seconds, output)) and stopped,
    the order alternating. Returns each program's seconds per round and its
    last output."""
    times = {"llama.cpp": [], "flover": []}
    outputs = {}
    for r in range(rounds):
        for program in (["llama.cpp", "flover"] if r % 2 == 0 else ["flover", "llama.cpp"]):
            proc, url = start(program)
            try:
                seconds, outputs[program] = run(program, url)
                times[program].append(seconds)
            finally:
                stop(proc)
            print(f"round {r + 1}, {program}: {seconds:.1f} s", file=sys.stderr, flush=True)
    return times, outputs


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def roofline(args):
    cmd = [os.path.join(ROOT, ".bazel-root/bin/benchmarks/model_benchmark"), f"--model={args.gguf}",
           f"--dtype={args.flover_dtype}", f"--threads={args.threads}", "--prefill_lengths=512",
           "--decode_batches=1", "--repeats=1"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    at = out.find("Roofline")
    return out[at:].strip() if at >= 0 else "(model_benchmark printed no roofline)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama_bin", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--passages", type=int, default=256)
    ap.add_argument("--min", type=int, default=128)
    ap.add_argument("--max", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flover_dtype", default="native")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab_low", type=int, default=1000)
    ap.add_argument("--vocab_high", type=int, default=30000)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    passages = [[rng.randrange(args.vocab_low, args.vocab_high) for _ in range(rng.randint(args.min, args.max))]
                for _ in range(args.passages)]
    tokens = sum(len(p) for p in passages)

    def run(program, url):
        model = "x" if program == "llama.cpp" else os.path.basename(args.gguf)[:-5]
        asyncio.run(workload(url, model, passages[:args.batch], args.batch, 1))  # warm-up
        got, duration = asyncio.run(workload(url, model, passages, args.batch, args.concurrency))
        return duration, got
    times, vectors = take_turns(args.rounds, lambda program: start(program, args), run)
    agree = [cosine(a, b) for a, b in zip(vectors["llama.cpp"], vectors["flover"])]
    print(f"{os.path.basename(args.gguf)}, {args.threads} threads; {args.passages} passages of {args.min}-{args.max} "
          f"tokens ({tokens} tokens), {args.batch} per request, {args.concurrency} requests in flight; last-token "
          f"pooling; Flover --dtype={args.flover_dtype}; medians of {args.rounds} rounds\n")
    print("| program | passages/s | prompt tokens/s | seconds |")
    print("|---|---:|---:|---:|")
    med = {}
    for program, label in (("llama.cpp", "llama-server --embeddings"), ("flover", "flover_server --embeddings")):
        med[program] = statistics.median(times[program])
        print(f"| {label} | {args.passages / med[program]:.2f} | {tokens / med[program]:.0f} | "
              f"{', '.join(f'{t:.1f}' for t in times[program])} |")
    print(f"\nFlover / llama.cpp: {med['llama.cpp'] / med['flover']:.2f}x")
    print(f"cosine between the two programs' vectors of the same passage: min {min(agree):.6f}, "
          f"median {statistics.median(agree):.6f}")
    print("\nRoofline (model_benchmark, same file):\n")
    print(roofline(args))


if __name__ == "__main__":
    main()
