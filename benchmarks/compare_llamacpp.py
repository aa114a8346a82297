#!/usr/bin/env python3
"""Flover's model_benchmark beside llama.cpp's llama-bench and
llama-batched-bench on the same shapes and dtypes, the programs taking
turns, ROUNDS rounds; prints one table of medians with ratios, and the
roofline model_benchmark measured in the same runs.

    tools/bazelw build //benchmarks:model_benchmark
    python3 benchmarks/compare_llamacpp.py --llama_bin=$L --f32=$M/f32.gguf --bf16=$M/bf16.gguf \\
        [--q8_0=$M/q8_0.gguf] [--model=builtin:gpt2-small] [--rounds=3] [--threads=2]

`$L` is llama.cpp's build/bin (built outside this repository, see
../shared/peers/README.md or benchmarks/README); the GGUF files hold random
weights of the same shapes as --model (make_gguf.py there for GPT-2 124M,
benchmarks/make_llama_gguf.py for TinyLlama). Workloads: prefill 512
(llama-bench pp512), decode at batch 1 after a 128-token context
(llama-bench -n 32 -d 128), aggregate decode of 32 sequences with 128-token
prompts (llama-batched-bench S_TG). BF16 runs keep both KV caches in bf16;
F32 runs keep Flover's in f32 and llama.cpp's in its default f16
(llama-bench refuses -ctk f32). Each of --f32, --bf16 and --q8_0 that is
given runs a row group; --q8_0 (llama-quantize's Q8_0 of the F32 file) sets
Flover's --dtype=int8 beside it, both KV caches in 16 bits (bf16 / f16)."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ("prefill 512", "decode batch 1", "decode batch 32")


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return out.stdout


# Flover's --dtype and --kv_dtype for each row group.
FLOVER_DTYPES = {"f32": ("f32", "f32"), "bf16": ("bf16", "bf16"), "int8": ("int8", "bf16"),
                 "native": ("native", "bf16")}


def flover(args, dtype):
    matmul, kv = FLOVER_DTYPES[dtype]
    out = run([os.path.join(ROOT, ".bazel-root/bin/benchmarks/model_benchmark"),
               f"--model={args.same_file or args.model}", f"--threads={args.threads}", "--repeats=3",
               f"--dtype={matmul}", f"--kv_dtype={kv}", "--prefill_lengths=512",
               "--decode_batches=1,32"])
    figures = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[1].startswith(("prefill 512", "decode batch")):
            name = "prefill 512" if cells[1].startswith("prefill") else \
                f"decode batch {cells[1].split()[2]}"
            ms = float(cells[3])
            rows = 512 if name == "prefill 512" else int(name.split()[-1])
            figures[name] = rows * 1000.0 / ms  # from the step time: a decimal for small figures
    roof = {}
    m = re.search(r"memory read bandwidth: ([\d.]+) GB/s -> batch-1 decode bound ([\d.]+)", out)
    if m:
        roof["read GB/s"], roof["batch-1 bound tok/s"] = float(m[1]), float(m[2])
    m = re.search(r"peak \(M=\d+\): ([\d.]+) GFLOP/s -> compute bound ([\d.]+)", out)
    if m:
        roof["GEMM peak GFLOP/s"], roof["compute bound tok/s"] = float(m[1]), float(m[2])
    return figures, roof


def llamacpp(args, dtype):
    gguf = args.same_file or {"f32": args.f32, "bf16": args.bf16, "int8": args.q8_0}[dtype]
    kv = []  # llama.cpp's default KV cache (f16): its faster setting here (bf16 KV halves its prefill)
    bench = os.path.join(args.llama_bin, "llama-bench")
    figures = {}
    for name, extra in (("prefill 512", ["-p", "512", "-n", "0"]),
                        ("decode batch 1", ["-p", "0", "-n", "32", "-d", "128"])):
        rows = json.loads(run([bench, "-m", gguf, "-t", str(args.threads), "-r", "2", "-o", "json",
                               *kv, *extra]))
        figures[name] = float(rows[0]["avg_ts"])
    out = run([os.path.join(args.llama_bin, "llama-batched-bench"), "-m", gguf, "-t",
               str(args.threads), "-c", "8192", "-b", "2048", "-ub", "512", *kv,
               "-npp", "128", "-ntg", "32", "-npl", "32"])
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        # |    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s | ...
        if len(cells) > 9 and cells[1] == "128" and cells[3] == "32":
            figures["decode batch 32"] = float(cells[8])
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama_bin", required=True)
    ap.add_argument("--f32")
    ap.add_argument("--bf16")
    ap.add_argument("--q8_0", help="a Q8_0 GGUF: compared with Flover's --dtype=int8")
    ap.add_argument("--model", default="builtin:gpt2-small")
    ap.add_argument("--same_file", help="one GGUF file both programs run (Flover at each --flover_dtypes)")
    ap.add_argument("--flover_dtypes", default="f32,bf16,int8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.same_file:
        return same_file(args)
    dtypes = [d for d, path in (("f32", args.f32), ("bf16", args.bf16), ("int8", args.q8_0)) if path]
    if not dtypes:
        sys.exit("give at least one of --f32, --bf16 and --q8_0 (or --same_file)")
    got = {}  # (program, dtype, workload) -> [figures]
    roofs = {}  # (dtype, name) -> [values]
    for r in range(args.rounds):
        for dtype in dtypes:
            f, roof = flover(args, dtype)
            for k, v in f.items():
                got.setdefault(("flover", dtype, k), []).append(v)
            for k, v in roof.items():
                roofs.setdefault((dtype, k), []).append(v)
            for k, v in llamacpp(args, dtype).items():
                got.setdefault(("llama.cpp", dtype, k), []).append(v)
            print(f"round {r + 1}, {dtype}: done", file=sys.stderr, flush=True)
    med = lambda xs: statistics.median(xs)  # noqa: E731
    print(f"{args.model}, {args.threads} threads, medians of {args.rounds} rounds (tokens/s)\n")
    print("| dtype | workload | Flover | llama.cpp | Flover / llama.cpp |")
    print("|---|---|---:|---:|---:|")
    for dtype in dtypes:
        for w in WORKLOADS:
            a, b = got.get(("flover", dtype, w)), got.get(("llama.cpp", dtype, w))
            if a and b:
                label = "int8 / Q8_0" if dtype == "int8" else dtype
                print(f"| {label} | {w} | {med(a):.1f} | {med(b):.1f} | {med(a) / med(b):.2f}x |")
    print("\nRoofline (model_benchmark, same runs, medians):\n")
    for (dtype, name), v in sorted(roofs.items()):
        print(f"- {dtype}: {name} {med(v):g}")


def same_file(args):
    """Both programs on one file: llama.cpp once per round, Flover at each dtype."""
    dtypes = args.flover_dtypes.split(",")
    got, roofs = {}, {}
    for r in range(args.rounds):
        for k, v in llamacpp(args, None).items():
            got.setdefault(("llama.cpp", k), []).append(v)
        for dtype in dtypes:
            f, roof = flover(args, dtype)
            for k, v in f.items():
                got.setdefault((dtype, k), []).append(v)
            for k, v in roof.items():
                roofs.setdefault((dtype, k), []).append(v)
        print(f"round {r + 1}: done", file=sys.stderr, flush=True)
    med = statistics.median
    name = os.path.basename(args.same_file)
    print(f"{name}, {args.threads} threads, medians of {args.rounds} rounds (tokens/s); llama.cpp "
          f"computes with the file's blocks (KV f16), Flover with the weights in its --dtype\n")
    header = " | ".join(f"Flover {d} | ratio" for d in dtypes)
    print(f"| workload | llama.cpp | {header} |")
    print("|---|---:|" + "---:|---:|" * len(dtypes))
    for w in WORKLOADS:
        base = got.get(("llama.cpp", w))
        if not base:
            continue
        cells = []
        for d in dtypes:
            v = got.get((d, w))
            cells.append(f"{med(v):.1f} | {med(v) / med(base):.2f}x" if v else "- | -")
        print(f"| {w} | {med(base):.1f} | " + " | ".join(cells) + " |")
    print("\nRoofline (model_benchmark, same runs, medians):\n")
    for (dtype, rname), v in sorted(roofs.items()):
        print(f"- {dtype}: {rname} {med(v):g}")


if __name__ == "__main__":
    main()
