#!/usr/bin/env python3
"""The KV cache by memory, measured on the real flover_server (loopback):

  capacity  How many concurrent 500-position chats (300 prompt tokens, 200
            generated) a 2 GiB cache holds with the model's full context
            allowed: before (one slot per sequence reserving the whole
            context: floor(2 GiB / (context x bytes per token))) and now
            (the cache's tokens / 512, blocks of 32). The new figure is then
            run: that many requests at once must all run together (peak
            running = the figure) with no preemption.
  overload  Twice as many long requests (700 + 300 positions) as a 512 MiB
            cache holds: all complete, sequences are preempted and
            recomputed, and every output equals the same request run alone
            on the idle server afterwards. Peak RSS of the server.
  prefix    Poisson chats (/v1/chat/completions, streamed, the `openai`
            package) that share a ~400-token system prompt, --prefix_caching
            on vs off, alternating: mean/p50/p90 time to first token and
            output tokens/s.
  hybrid    Memory for one long sequence: builtin:qwen3.5-0.8b (Qwen3.5-0.8B's
            shapes: 18 gated delta net layers, 6 attention layers) beside
            builtin:qwen3-0.6b (Qwen3-0.6B's: 28 attention layers, the same
            width 1024), bf16 KV cache: the bytes a position takes and a
            sequence's recurrent state (the server's own accounting), what a
            32,768-position context takes, and one real request of
            --long_prompt tokens + 32 generated: the most bytes held
            (Stats.kv_bytes_peak: blocks and state slot), prefill time.
  hybrid_prefix  Prefix reuse on a hybrid (builtin:qwen3.5-0.8b, bf16
            weights): Poisson requests whose token-id prompts share a
            1,024-token prefix (a system prompt) and differ in a 64-token
            tail, --prefix_caching on (the prefix resumes from a checkpoint
            of the recurrent state beside the cached blocks) vs off
            (a hybrid without checkpoints cannot reuse a prefix): time to
            first token (first streamed token), alternating rounds.
  window    Two 8,064-position requests at once in a 256 MiB cache on
            builtin:mistral-1b (TinyLlama's shapes, every layer windowed to
            Mistral 7B's 4096 positions) and builtin:gemma3-1b (Gemma 3
            1B's shapes, five local layers of window 512 to one global),
            bf16, prefix caching off: --kv_free_behind_window off vs on. The
            most KV bytes held (Stats.kv_bytes_peak), how many ran at once,
            preemptions, the server's peak RSS over what it had loaded, wall
            time; the outputs must be equal.

    tools/bazelw build //server:flover_server
    .venv-test/bin/python benchmarks/kv_memory.py [--parts=capacity,overload,prefix,window,hybrid,hybrid_prefix] \\
        [--gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf] [--rounds=2] [--rate=1.5]

Greedy, ignore_eos; 2 threads; one client thread per request on the same
cores as the server."""
import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from flover_client import FloverClient  # noqa: E402
from chat_serving import free_port, stop, summary, wait_ready, workload  # noqa: E402

SERVER = os.path.join(ROOT, ".bazel-root/bin/server/flover_server")
TWO_GIB = 2 << 30


class Server:
    """flover_server on loopback with gRPC, metrics and HTTP ports."""

    def __init__(self, *flags, binary=SERVER):
        http = free_port()
        self.proc = subprocess.Popen([binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                      f"--http_listen=127.0.0.1:{http}", "--threads=2", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit("server exited:\n" + "".join(self.lines))
            self.lines.append(line)
            if line.startswith("listening on "):
                self.grpc = line.split()[-1]
            if line.startswith("metrics on "):
                self.metrics = line.split()[-1]
            if line.startswith("kernels compiled"):
                break
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.http = f"http://127.0.0.1:{http}"
        wait_ready(self.http, self.proc)
        self.client = FloverClient(self.grpc)

    def kv_line(self):
        return next(line.strip() for line in self.lines if line.startswith("KV cache"))

    def metric(self, name):
        with urllib.request.urlopen(self.metrics, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise KeyError(name)

    def peak_rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def close(self):
        stop(self.proc)


def prompt_ids(n, seed, vocab):
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def run_concurrent(server, prompts, new_tokens):
    """All at once; returns (outputs, peak running, wall seconds)."""
    outputs = [None] * len(prompts)
    peak = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], server.metric("flover_requests_running"))
            time.sleep(0.05)

    def one(i):
        outputs[i] = [t for r in server.client.generate(token_ids=prompts[i], max_new_tokens=new_tokens,
                                                        temperature=0, ignore_eos=True)
                      for t in r.token_ids]
    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    done.set()
    watcher.join()
    return outputs, int(peak[0]), wall


def capacity(args):
    print("## Capacity: concurrent 500-position chats in a 2 GiB KV cache, full context allowed\n")
    print("| model | KV dtype | context | bytes/token | before: slots x context | now: tokens | "
          "now: chats (x512) | measured: peak running | preemptions | all complete | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    models = ["builtin:gpt2-small"] + ([args.gguf] if args.gguf else [])
    for model in models:
        for kv in ("f32", "bf16"):
            s = Server(f"--model={model}", "--kv_cache_memory=2GiB", "--max_batch=1024",
                       f"--kv_dtype={kv}", "--max_tokens_per_step=512")
            try:
                info = s.client.model_info()
                tokens = info.kv_cache_tokens
                per_token = s.metric("flover_kv_cache_capacity_bytes") / tokens
                before = int(TWO_GIB // (info.max_seq_len * per_token))
                fit = tokens // 512
                prompts = [prompt_ids(300, i, info.vocab_size) for i in range(fit)]
                outs, peak, wall = run_concurrent(s, prompts, 200)
                complete = all(len(o) == 200 for o in outs)
                name = os.path.basename(model)
                print(f"| {name} | {kv} | {info.max_seq_len} | {per_token:,.0f} | {before} | {tokens:,} | "
                      f"{fit} | {peak} | {int(s.metric('flover_preemptions_total'))} | "
                      f"{'yes' if complete else 'NO'} | {wall:.1f} |", flush=True)
            finally:
                s.close()
    print()


def overload(args):
    print("## Overload: twice as many 1,000-position requests as a 512 MiB cache holds "
          "(builtin:gpt2-small, f32)\n")
    s = Server("--model=builtin:gpt2-small", "--kv_cache_memory=512MiB", "--max_batch=64")
    try:
        info = s.client.model_info()
        fit = info.kv_cache_tokens // 1024
        n = 2 * fit
        prompts = [prompt_ids(700, 100 + i, info.vocab_size) for i in range(n)]
        outs, peak, wall = run_concurrent(s, prompts, 300)
        preemptions = int(s.metric("flover_preemptions_total"))
        rss_loaded = s.peak_rss_mib()
        same = 0
        for i in range(n):
            alone, _, _ = run_concurrent(s, [prompts[i]], 300)
            same += alone[0] == outs[i]
        print(f"{s.kv_line()}\n")
        print("| requests | fit at once | peak running | preemptions | complete | equal to alone | "
              "wall s | peak RSS MiB |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {n} | {fit} | {peak} | {preemptions} | {sum(len(o) == 300 for o in outs)} | {same} | "
              f"{wall:.1f} | {rss_loaded:.0f} |\n", flush=True)
    finally:
        s.close()


SYSTEM = ("You are the support assistant of Flover Hardware, a shop that sells tools, garden "
          "equipment and paint. Follow these rules in every answer. ")


def system_prompt():
    rules = [f"Rule {i}: " + r for i, r in enumerate([
        "greet the customer by name when they give one, and otherwise greet them politely.",
        "answer in at most three short sentences unless the customer asks for detail.",
        "never invent prices; say that prices are listed on the website and change weekly.",
        "for returns, explain that unused items can be returned within thirty days with a receipt.",
        "for deliveries, say that orders placed before noon ship the same day on weekdays.",
        "do not give electrical or gas installation advice; recommend a licensed professional.",
        "when asked about paint, ask whether the surface is indoors or outdoors before advising.",
        "when asked about lawn mowers, ask about the size of the garden and the kind of grass.",
        "keep a friendly and calm tone even when the customer is upset or impatient.",
        "if you do not know the answer, say so and offer to connect them with a human colleague.",
        "never ask for passwords, card numbers or other secrets in the chat.",
        "mention the loyalty programme only when the customer asks about discounts.",
        "store hours are eight to six on weekdays and nine to four on Saturdays; closed Sundays.",
        "the shop is at 12 Harbour Street, next to the old train station, with free parking.",
        "for safety questions about ladders, recommend checking the load rating on the label.",
        "for garden questions, suggest watering early in the morning or late in the evening.",
        "end each answer by asking whether there is anything else you can help with.",
    ], 1)]
    return SYSTEM + " ".join(rules)


def prefix(args):
    if not args.gguf:
        print("prefix: needs --gguf (a chat model)\n")
        return
    questions = []
    with open(os.path.join(ROOT, "tools", "demo_chats.jsonl")) as f:
        import json
        for line in f:
            d = json.loads(line)
            if "prompt" in d:
                questions.append(d["prompt"])
    system = system_prompt()
    rng = random.Random(args.seed)
    t, plan = 0.0, []
    for i in range(args.requests):
        t += rng.expovariate(args.rate)
        plan.append((t, [{"role": "system", "content": system},
                         {"role": "user", "content": questions[i % len(questions)]}]))
    got = {}
    hits = {}
    for r in range(args.rounds):
        for caching in (["true", "false"] if r % 2 == 0 else ["false", "true"]):
            s = Server(f"--model={args.gguf}", f"--prefix_caching={caching}", "--max_seq_len=2048")
            try:
                model = s.client.model_info().served_model_name or os.path.basename(args.gguf)[:-5]
                asyncio.run(workload(s.http, model, plan[:1], 4))  # warm-up (also caches on)
                res, dur = asyncio.run(workload(s.http, model, plan, args.max_tokens))
                got.setdefault(caching, []).append(summary(res, dur))
                hits[caching] = (s.metric("flover_prefix_cache_hits_total"),
                                 s.metric("flover_prefix_cache_queries_total"),
                                 s.metric("flover_prompt_tokens_total"))
            finally:
                s.close()
            print(f"round {r + 1}: prefix_caching={caching} done", file=sys.stderr, flush=True)
    print(f"## Prefix reuse: {args.requests} Poisson chats at {args.rate:g}/s sharing a system prompt, "
          f"{os.path.basename(args.gguf)}, {args.max_tokens} tokens per reply; medians of {args.rounds} "
          "rounds\n")
    keys = ["tokens/s", "requests/s", "TTFT mean ms", "TTFT p50 ms", "TTFT p90 ms", "e2e mean s"]
    print("| --prefix_caching | " + " | ".join(keys) + " | prefix hits / queries (tokens) | prompt tokens computed |")
    print("|---|" + "---:|" * (len(keys) + 2))
    for caching in ("true", "false"):
        rows = got[caching]
        med = lambda k: statistics.median(x[k] for x in rows)  # noqa: E731
        h, q, computed = hits[caching]
        print(f"| {caching} | " + " | ".join(f"{med(k):.{2 if k.endswith(' s') else 1}f}" for k in keys) +
              f" | {h:,.0f} / {q:,.0f} | {computed:,.0f} |")
    ratio = statistics.median(x["TTFT mean ms"] for x in got["false"]) / \
        statistics.median(x["TTFT mean ms"] for x in got["true"])
    print(f"\nmean TTFT, reuse off / on: {ratio:.1f}x\n")


def window(args):
    print("## Sliding windows: KV blocks behind them given back\n")
    print("Two requests at once, each 8,000 prompt tokens + 64 generated (greedy), bf16 weights and "
          "KV cache, --kv_cache_memory=256MiB, prefix caching off, --max_tokens_per_step=512; "
          "--kv_free_behind_window on vs off, run back to back.\n")
    print("| model | --kv_free_behind_window | KV held at most MiB | every layer, whole contexts MiB | "
          "peak running | preemptions | peak RSS over loaded MiB | wall s | outputs equal |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for model, label in (("builtin:mistral-1b", "Mistral-shaped 1.1B (every layer: window 4096)"),
                         ("builtin:gemma3-1b", "Gemma 3 1B shapes (22 of 26 layers: window 512)")):
        results, whole = {}, 0.0
        for free in ("false", "true"):
            s = Server(f"--model={model}", "--dtype=bf16", "--kv_dtype=bf16", "--max_seq_len=16384",
                       "--kv_cache_memory=256MiB", "--max_batch=8", "--max_tokens_per_step=512",
                       "--prefix_caching=false", f"--kv_free_behind_window={free}")
            try:
                info = s.client.model_info()
                if free == "false":  # every layer in the same blocks: bytes per position
                    per_token = s.metric("flover_kv_cache_capacity_bytes") / info.kv_cache_tokens
                    whole = 2 * 8064 * per_token / 2**20
                loaded = s.peak_rss_mib()
                prompts = [prompt_ids(8000, 300 + i, info.vocab_size) for i in range(2)]
                outs, peak, wall = run_concurrent(s, prompts, 64)
                stats = s.client.stats()
                results[free] = outs
                same = "" if free == "false" else ("yes" if outs == results["false"] else "NO")
                print(f"| {label} | {free} | {stats.kv_bytes_peak / 2**20:.0f} | {whole:.0f} | {peak} | "
                      f"{stats.preemptions} | {s.peak_rss_mib() - loaded:.0f} | {wall:.1f} | {same} |",
                      flush=True)
            finally:
                s.close()
    print()


def hybrid(args):
    print("## A hybrid's memory: recurrent state beside the KV blocks\n")
    print(f"bf16 weights and KV cache, --kv_cache_memory=4GiB, prefix caching off; the real request: "
          f"{args.long_prompt:,} prompt tokens + 32 generated (greedy), --max_tokens_per_step=512.\n")
    print("| model | KV bytes per position | recurrent state per sequence | one 32,768-position context | "
          f"held at most for {args.long_prompt + 32:,} positions (measured) | same, from the accounting | "
          "prefill s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for model, label in (("builtin:qwen3-0.6b", "Qwen3-0.6B shapes (28 attention layers)"),
                         ("builtin:qwen3.5-0.8b", "Qwen3.5-0.8B shapes (6 attention + 18 delta net)")):
        s = Server(f"--model={model}", "--dtype=bf16", "--kv_dtype=bf16", "--max_seq_len=32768",
                   "--kv_cache_memory=4GiB", "--max_batch=4", "--max_tokens_per_step=512",
                   "--prefix_caching=false")
        try:
            info = s.client.model_info()
            slots, slot_bytes = 0, 0.0
            for line in s.lines:  # "recurrent state: N slots of X MiB (...)"
                if line.startswith("recurrent state:"):
                    words = line.split()
                    slots = int(words[2])
                    slot_bytes = float(words[5]) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[words[6]]
            capacity = s.metric("flover_kv_cache_capacity_bytes")
            per_token = (capacity - slots * slot_bytes) / info.kv_cache_tokens
            positions = args.long_prompt + 32
            blocks = -(-positions // 32)
            accounted = blocks * 32 * per_token + slot_bytes
            whole = 32768 * per_token + slot_bytes
            prompt = prompt_ids(args.long_prompt, 7, info.vocab_size)
            t0 = time.monotonic()
            first = None
            for r in s.client.generate(token_ids=prompt, max_new_tokens=32, temperature=0, ignore_eos=True):
                if first is None and r.token_ids:
                    first = time.monotonic() - t0
            peak = s.client.stats().kv_bytes_peak
            print(f"| {label} | {per_token:,.0f} | {slot_bytes / 2**20:.1f} MiB | {whole / 2**20:,.0f} MiB | "
                  f"{peak / 2**20:,.0f} MiB | {accounted / 2**20:,.0f} MiB | {first:.1f} |", flush=True)
        finally:
            s.close()
    print()


def hybrid_prefix(args):
    model = "builtin:qwen3.5-0.8b"
    rng = random.Random(args.seed)
    system = prompt_ids(1024, 11, 248320)
    t, plan = 0.0, []
    for i in range(args.requests):
        t += rng.expovariate(args.rate)
        plan.append((t, system + prompt_ids(64, 1000 + i, 248320)))

    def run(server):
        ttft = [None] * len(plan)

        def one(i):
            time.sleep(max(0.0, t0 + plan[i][0] - time.monotonic()))
            start = time.monotonic()
            for r in server.client.generate(token_ids=plan[i][1], max_new_tokens=args.max_tokens, temperature=0,
                                            ignore_eos=True):
                if ttft[i] is None and r.token_ids:
                    ttft[i] = time.monotonic() - start
        t0 = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(plan))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return ttft, time.monotonic() - t0

    got, hits = {}, {}
    for r in range(args.rounds):
        for caching in (["true", "false"] if r % 2 == 0 else ["false", "true"]):
            s = Server(f"--model={model}", "--dtype=bf16", f"--prefix_caching={caching}", "--max_seq_len=4096",
                       "--kv_cache_memory=2GiB")
            try:
                # Warm-up: one request first (with reuse on, its prefix is then cached, as a
                # served system prompt would be).
                list(s.client.generate(token_ids=plan[0][1][:1100], max_new_tokens=1, temperature=0))
                ttft, wall = run(s)
                got.setdefault(caching, []).append((ttft, wall))
                st = s.client.stats()
                hits[caching] = (st.prefix_cache_hit_tokens, st.prefix_cache_query_tokens, st.prompt_tokens)
            finally:
                s.close()
            print(f"round {r + 1}: prefix_caching={caching} done", file=sys.stderr, flush=True)
    print(f"## Prefix reuse on a hybrid: {args.requests} Poisson requests at {args.rate:g}/s, {model} (bf16), "
          f"prompts of a shared 1,024-token prefix + 64 tokens of their own, {args.max_tokens} tokens each; "
          f"medians of {args.rounds} rounds\n")
    print("| --prefix_caching | TTFT mean ms | TTFT p50 ms | TTFT p90 ms | wall s | prefix hits / queries (tokens) "
          "| prompt tokens computed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    means = {}
    for caching in ("true", "false"):
        rows = got[caching]
        stat = lambda f: statistics.median(f(sorted(x[0])) for x in rows)  # noqa: E731
        means[caching] = stat(lambda v: statistics.mean(v)) * 1000
        h, q, computed = hits[caching]
        print(f"| {caching} | {means[caching]:.0f} | {stat(lambda v: v[len(v) // 2]) * 1000:.0f} | "
              f"{stat(lambda v: v[int(len(v) * 0.9)]) * 1000:.0f} | "
              f"{statistics.median(x[1] for x in rows):.1f} | {h:,} / {q:,} | {computed:,} |")
    print(f"\nmean TTFT, reuse off / on: {means['false'] / means['true']:.1f}x\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="capacity,overload,prefix,window")
    ap.add_argument("--gguf", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1.5, help="prefix: Poisson arrivals per second")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--max_tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--long_prompt", type=int, default=32000, help="hybrid: the real request's prompt tokens")
    args = ap.parse_args()
    if args.gguf and not os.path.exists(args.gguf):
        print(f"{args.gguf} is missing (tools/setup.sh fetches it); SmolLM2 parts skipped\n")
        args.gguf = ""
    cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"],
                         capture_output=True, text=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores\n")
    for part in args.parts.split(","):
        {"capacity": capacity, "overload": overload, "prefix": prefix, "window": window, "hybrid": hybrid,
         "hybrid_prefix": hybrid_prefix}[part](args)


if __name__ == "__main__":
    main()
