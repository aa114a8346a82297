#!/usr/bin/env python3
"""KV cache formats: memory per token, and decoding at long contexts, Flover
(benchmarks/model_benchmark --decode_context) beside llama.cpp's llama-bench
(-d CONTEXT -n 16, flash attention on, the same -ctk/-ctv), on the same GGUF
file, the two programs taking turns for each format, in one sitting.

    tools/bazelw build //benchmarks:model_benchmark
    python3 benchmarks/kv_formats.py --llama_bin=$L/build/bin \\
        --case=models/SmolLM2-135M-Instruct.Q4_1.gguf:4096 \\
        --case=$M/qwen3-0.6b-random-q8_0.gguf:16384:f32,q8_0 [--formats=f32,bf16,q8_0,q4_0]

Flover runs the file's blocks (--dtype=native) with each --kv_dtype, at
batch 1 and 32 (batch 32 where the cache fits in memory; its cache is
filled with a pattern instead of 32 prefills, model_benchmark's
--decode_context). llama.cpp has no f32 KV with llama-bench: its f16 (its
default) stands beside Flover's f32; bf16, q8_0 and q4_0 are the same
formats on both. llama.cpp's batch 32 (llama-batched-bench) must prefill 32
contexts first, which at these lengths takes longer than this benchmark
may: it is not run. A case's third field limits the formats llama.cpp runs
(each of its batch-1 runs prefills CONTEXT positions first: minutes at
16K on a 0.6B model). The batch-1 bound: the machine's read bandwidth
(model_benchmark's probe) over the weights' bytes plus the context's K/V
bytes a step reads."""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_KV = {"f32": "f16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0"}


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return out.stdout


def flover(args, gguf, context, fmt):
    out = run([os.path.join(ROOT, ".bazel-root/bin/benchmarks/model_benchmark"), f"--model={gguf}",
               f"--threads={args.threads}", "--repeats=3", "--dtype=native", f"--kv_dtype={fmt}",
               "--prefill_lengths=", "--decode_batches=1,32", f"--decode_context={context}"])
    res = {}
    m = re.search(r"\((\d+) bytes per token\)", out)
    res["bytes/token"] = int(m[1])
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1].startswith("decode batch"):
            batch = int(cells[1].split()[2])
            if cells[2].startswith("failed"):
                sys.exit(f"model_benchmark: {line}")
            res[f"b{batch}"] = None if cells[2].startswith("does not fit") else \
                batch * 1000.0 / float(cells[3])
    m = re.search(r"memory read bandwidth: ([\d.]+) GB/s -> batch-1 decode bound [\d.]+ tokens/s "
                  r"\(about (\d+) MB per step", out)
    if m:
        res["read GB/s"], res["weight MB"] = float(m[1]), float(m[2])
    return res


def llamacpp(args, gguf, context, fmt):
    kv = LLAMA_KV[fmt]
    rows = json.loads(run([os.path.join(args.llama_bin, "llama-bench"), "-m", gguf, "-t", str(args.threads),
                           "-r", "2" if context <= 8192 else "1", "-o", "json", "-fa", "1", "-ctk", kv, "-ctv", kv, "-p", "0", "-n", "16",
                           "-d", str(context)]))
    return float(rows[0]["avg_ts"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama_bin", required=True)
    ap.add_argument("--case", action="append", required=True, help="GGUF:CONTEXT[:llama.cpp's formats]")
    ap.add_argument("--formats", default="f32,bf16,q8_0,q4_0")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {args.threads} threads\n")
    for case in args.case:
        gguf, context, *peer = case.split(":")
        context = int(context)
        peer_formats = peer[0].split(",") if peer else args.formats.split(",")
        rows = []
        for fmt in args.formats.split(","):
            f = flover(args, gguf, context, fmt)
            ll = llamacpp(args, gguf, context, fmt) if fmt in peer_formats else None
            rows.append((fmt, f, ll))
            print(f"  {os.path.basename(gguf)} {context} {fmt}: {f} llama.cpp {ll}", file=sys.stderr)
        bw = rows[0][1].get("read GB/s", 0)
        weight_mb = rows[0][1].get("weight MB", 0)
        print(f"### {os.path.basename(gguf)}, context {context}\n")
        print(f"Roofline: memory read bandwidth {bw:.1f} GB/s; weights {weight_mb:.0f} MB per step\n")
        print("| KV format (llama.cpp's) | bytes/token | KV of one sequence | batch-1 bound tok/s | "
              "Flover batch 1 | llama.cpp batch 1 | ratio | Flover batch 32 | KV of 32 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for fmt, f, ll in rows:
            per_seq = f["bytes/token"] * context
            bound = bw * 1e9 / (weight_mb * 1e6 + per_seq) if bw else 0
            b32 = f"{f['b32']:.1f}" if f.get("b32") else "does not fit"
            peer = f"{ll:.1f} | {f['b1'] / ll:.2f}x" if ll else "not run | "
            print(f"| {fmt} ({LLAMA_KV[fmt]}) | {f['bytes/token']} | {per_seq / 2**20:.0f} MiB | {bound:.0f} | "
                  f"{f['b1']:.1f} | {peer} | {b32} | {32 * per_seq / 2**30:.1f} GiB |")
        print()


if __name__ == "__main__":
    main()
