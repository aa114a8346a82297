#!/usr/bin/env python3
"""Hugging Face transformers on the same GPU, as the peer for model_benchmark.

The same shapes as builtin:gpt2-small (12 layers, 768 wide, 12 heads, vocabulary
50257, 1024 positions), random weights, bf16 (or --dtype), greedy decoding:

  prefill   one forward over a [1, L] prompt, tokens/s
  decode    generate() at batch B: (time for 1+N new tokens - time for 1) gives
            the N decode steps alone; aggregate tokens/s = B*N / that

--mode=eager uses the dynamic cache; --mode=static the static cache;
--mode=compile the static cache with forward compiled by torch.compile
("reduce-overhead", CUDA graphs). Times are medians of --repeats after a
warm-up, with torch.cuda.synchronize() around each.

  python3 benchmarks/hf_gpu_peer.py --batches=1,8,32,256 --modes=eager,static,compile
"""
import argparse
import statistics
import sys
import time

import torch
import transformers


def timed(fn, repeats):
    fn()  # warm-up (and compilation)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    parser.add_argument("--prefill_lengths", default="512")
    parser.add_argument("--batches", default="1,8,32,256")
    parser.add_argument("--prompt_len", type=int, default=8)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default="eager,static,compile")
    args = parser.parse_args()

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=50257,
                                     n_positions=1024)
    model = transformers.GPT2LMHeadModel(config).to("cuda", dtype).eval()
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}, {args.dtype}", flush=True)
    print("| peer | workload | tokens/s |\n|---|---|---:|", flush=True)

    with torch.inference_mode():
        for length in [int(x) for x in args.prefill_lengths.split(",") if x]:
            ids = torch.randint(0, config.vocab_size, (1, length), device="cuda")
            t = timed(lambda: model(ids, use_cache=False), args.repeats)
            print(f"| HF eager | prefill {length} | {length / t:,.0f} |", flush=True)

        for mode in [m for m in args.modes.split(",") if m]:
            if mode == "compile":
                model.forward = torch.compile(model.forward, mode="reduce-overhead",
                                              fullgraph=False)
            for batch in [int(x) for x in args.batches.split(",") if x]:
                ids = torch.randint(0, config.vocab_size, (batch, args.prompt_len), device="cuda")
                mask = torch.ones_like(ids)

                def gen(n):
                    kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  pad_token_id=0, attention_mask=mask)
                    if mode in ("static", "compile"):
                        kwargs["cache_implementation"] = "static"
                    return model.generate(ids, **kwargs)
                try:
                    t_all = timed(lambda: gen(1 + args.new_tokens), args.repeats)
                    t_one = timed(lambda: gen(1), args.repeats)
                except Exception as err:  # report and go on: a peer mode may not work here
                    print(f"| HF {mode} | decode batch {batch} | failed: "
                          f"{type(err).__name__}: {str(err)[:120]} |", flush=True)
                    continue
                rate = batch * args.new_tokens / max(t_all - t_one, 1e-9)
                print(f"| HF {mode} | decode batch {batch} | {rate:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
