#!/usr/bin/env python3
"""What Qwen3.5's multi-token-prediction drafter (--speculative=mtp) costs,
on one flover_server with builtin:qwen3.5-0.8b (Qwen3.5-0.8B's shapes, bf16,
random weights with a random MTP layer, as the built-in generates them):
requests opted out of speculation (`speculative: false`) against requests
drafting, taking turns on the same process.

Random weights draft almost nothing right, so this measures the price side
only: the layer reading each prompt's hidden rows (time to first token) and
the drafts that are verified and refused (decode rate), with the engine's
draft pacing (refused drafts pause a sequence's drafting). What a trained
layer gains depends on its acceptance, which needs the released weights
(not available offline); the break-even acceptance is printed from the
measured costs: a draft taken saves one decode step.

    tools/bazelw build //server:flover_server
    .venv-test/bin/python benchmarks/mtp_speculation.py [--rounds=2] [--draft_tokens=1,3]

Batch 1, greedy, ignore_eos; 2 threads."""
import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_memory import Server  # noqa: E402


def run(server, prompt, n, speculative):
    start = time.monotonic()
    first = last = None
    count = 0
    for r in server.client.generate(token_ids=prompt, max_new_tokens=n, temperature=0, ignore_eos=True,
                                    speculative=speculative):
        if r.token_ids:
            now = time.monotonic()
            first = first or now
            last = now
            count += len(r.token_ids)
    return first - start, (count - 1) / (last - first)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--draft_tokens", default="1,3")
    ap.add_argument("--prompt_len", type=int, default=1024)
    ap.add_argument("--max_tokens", type=int, default=96)
    args = ap.parse_args()
    rng = random.Random(3)
    prompts = [[rng.randrange(248320) for _ in range(args.prompt_len)] for _ in range(2 * args.rounds)]
    print(f"builtin:qwen3.5-0.8b bf16, batch 1, prompts of {args.prompt_len} token ids, {args.max_tokens} "
          f"tokens each, {args.rounds} rounds (medians)\n")
    print("| drafts per step | TTFT off ms | TTFT mtp ms | decode off tok/s | decode mtp tok/s | drafts verified "
          "/ taken | extra ms per draft | break-even acceptance |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in [int(x) for x in args.draft_tokens.split(",")]:
        s = Server("--model=builtin:qwen3.5-0.8b", "--dtype=bf16", "--kv_dtype=bf16", "--prefix_caching=false",
                   "--speculative=mtp", f"--num_speculative_tokens={k}", "--max_seq_len=4096")
        try:
            got = {False: [], True: []}
            before = s.client.stats()
            for r in range(args.rounds):
                for spec in ([False, True] if r % 2 == 0 else [True, False]):
                    got[spec].append(run(s, prompts[2 * r + spec], args.max_tokens, spec))
            after = s.client.stats()
        finally:
            s.close()
        drafts = after.speculative_draft_tokens - before.speculative_draft_tokens
        taken = after.speculative_accepted_tokens - before.speculative_accepted_tokens
        ttft = {m: statistics.median(x[0] for x in got[m]) * 1000 for m in got}
        rate = {m: statistics.median(x[1] for x in got[m]) for m in got}
        # Decode time added per verified draft token, over the runs that drafted.
        steps = args.max_tokens - 1
        extra = (steps / rate[True] - steps / rate[False]) * 1000 * args.rounds / max(drafts, 1)
        step_ms = 1000 / rate[False]
        print(f"| {k} | {ttft[False]:.0f} | {ttft[True]:.0f} | {rate[False]:.1f} | {rate[True]:.1f} | "
              f"{drafts} / {taken} | {extra:.1f} | {extra / step_ms:.0%} |")
    print("\n(extra ms per draft: the mtp runs' added decode time over the drafts verified; break-even "
          "acceptance: that over one decode step, the share of drafts that must stand to repay them)")


if __name__ == "__main__":
    main()
