#!/usr/bin/env python3
"""Rerank served: llama-server --rerank beside flover_server on one reranker
GGUF (llama.cpp's converter's: benchmarks/make_reranker_gguf.py, then
llama-quantize), through /v1/rerank: one query and DOCS documents (seeded
random words, MIN-MAX words each) per request, REQUESTS requests one after
another; the servers take turns each round (order alternating). Prints
documents/s per program (medians over rounds), the ratio, whether the two
rank the documents alike (Spearman's rho over each request's scores) and the
largest score difference, and the machine's roofline from model_benchmark.

    .venv-test/bin/python benchmarks/rerank_serving.py --llama_bin=$PERF/llama.cpp/build/bin \\
        --gguf=qwen3-reranker-0.6b-random-q8_0.gguf [--docs=64] [--requests=2] [--rounds=2]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_serving import ROOT, free_port, wait_ready  # noqa: E402
from embeddings_serving import roofline, take_turns  # noqa: E402

WORDS = ("the capital of china is beijing gravity force attracts two bodies towards each other it gives weight "
         "to physical objects machine learning models can rank documents in seconds paris france large city "
         "query answer passage search web retrieve relevant yes no river mountain ocean language").split()


def start(program, args):
    port = free_port()
    ctx = 1024
    if program == "llama.cpp":
        cmd = [os.path.join(args.llama_bin, "llama-server"), "-m", args.gguf, "-t", str(args.threads), "-tb",
               str(args.threads), "--rerank", "-np", str(args.parallel), "-c", str(args.parallel * ctx), "-b", "2048",
               "-ub", str(ctx), "--host", "127.0.0.1", "--port", str(port)]
    else:
        cmd = [os.path.join(ROOT, ".bazel-root/bin/server/flover_server"), f"--model={args.gguf}",
               f"--threads={args.threads}", f"--max_seq_len={ctx}", f"--max_batch={args.docs}",
               f"--dtype={args.flover_dtype}", "--listen=127.0.0.1:0", f"--http_listen=127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc)
    return proc, url


def rerank(url, query, docs):
    body = json.dumps({"query": query, "documents": docs, "top_n": len(docs)}).encode()
    req = urllib.request.Request(url + "/v1/rerank", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        results = json.load(r)["results"]
    scores = [0.0] * len(docs)
    for x in results:
        scores[x["index"]] = x["relevance_score"]
    return scores


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    for rank, i in enumerate(order):
        out[i] = rank
    return out


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama_bin", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--min", type=int, default=80)
    ap.add_argument("--max", type=int, default=240)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4, help="llama-server's slots")
    ap.add_argument("--flover_dtype", default="native")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = [(" ".join(rng.choice(WORDS) for _ in range(8)),
             [" ".join(rng.choice(WORDS) for _ in range(rng.randint(args.min, args.max))) for _ in range(args.docs)])
            for _ in range(args.requests)]

    def run(program, url):
        rerank(url, work[0][0], work[0][1][:2])  # warm-up
        t0 = time.monotonic()
        got = [rerank(url, q, docs) for q, docs in work]
        return time.monotonic() - t0, got
    times, scores = take_turns(args.rounds, lambda program: start(program, args), run)
    n = args.docs * args.requests
    print(f"{os.path.basename(args.gguf)}, {args.threads} threads; {args.requests} requests of {args.docs} documents "
          f"({args.min}-{args.max} words) one after another; llama-server -np {args.parallel}; Flover "
          f"--dtype={args.flover_dtype}; medians of {args.rounds} rounds\n")
    print("| program | documents/s | seconds |")
    print("|---|---:|---:|")
    med = {}
    for program, label in (("llama.cpp", "llama-server --rerank"), ("flover", "flover_server")):
        med[program] = statistics.median(times[program])
        print(f"| {label} | {n / med[program]:.2f} | {', '.join(f'{t:.1f}' for t in times[program])} |")
    print(f"\nFlover / llama.cpp: {med['llama.cpp'] / med['flover']:.2f}x")
    rho = [spearman(a, b) for a, b in zip(scores["llama.cpp"], scores["flover"])]
    diff = max(abs(x - y) for a, b in zip(scores["llama.cpp"], scores["flover"]) for x, y in zip(a, b))
    print(f"the two programs' rankings: Spearman's rho {min(rho):.4f} at worst; largest score difference {diff:.2e}")
    print("\nRoofline (model_benchmark, same file):\n")
    print(roofline(args))


if __name__ == "__main__":
    main()
