#!/usr/bin/env python3
"""Soak: mixed Poisson load through gRPC for a long time (30 minutes by
default), with cancels, deadlines, invalid requests and stop conditions;
samples the server's RSS, open file descriptors and threads, and checks that
they stay flat after warm-up and that every request it accepted ended
exactly once. A script, not a CI test (it takes half an hour):

    tools/bazelw build //server:flover_server
    .venv-test/bin/python tools/soak.py [--seconds=1800] [--rate=40] [--model=builtin:tiny]

Prints one line per sample and a summary; exits non-zero if a check fails."""
import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import grpc  # noqa: E402
from flover_client import flover_pb2 as pb, flover_pb2_grpc as pb_grpc  # noqa: E402


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def sample(pid):
    return {"rss_kib": proc_status(pid, "VmRSS"), "threads": proc_status(pid, "Threads"),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def load(address, args, counts, stop_at):
    rng = random.Random(args.seed)
    chans = [grpc.aio.insecure_channel(address) for _ in range(4)]
    stubs = [pb_grpc.FloverStub(c) for c in chans]
    tasks = set()

    async def one(i):
        kind = rng.choices(["plain", "cancel", "deadline", "invalid", "stop", "logprobs"],
                           weights=[55, 12, 12, 5, 8, 8])[0]
        r = pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=[rng.randrange(args.vocab) for _ in range(rng.randint(1, 64))]),
            sampling=pb.Sampling(temperature=rng.choice([0.0, 0.7, 1.0]), seed=i),
            stopping=pb.Stopping(max_new_tokens=rng.randint(1, 128), ignore_eos=rng.random() < 0.5))
        if kind == "invalid":
            r.sampling.top_p = 1.5
        if kind == "stop":
            r.stopping.stop_token_ids.extend(rng.sample(range(args.vocab), 8))
        if kind == "logprobs":
            r.return_logprobs = True
        timeout = rng.uniform(0.01, 0.5) if kind == "deadline" else 600
        call = stubs[i % len(stubs)].Generate(r, timeout=timeout)
        if kind == "cancel":
            asyncio.get_running_loop().call_later(rng.uniform(0, 0.3), call.cancel)
        finishes = 0
        try:
            async for m in call:
                finishes += m.finish_reason != 0
            code = (await call.code()).name
            if finishes != 1:
                counts["bad_finish"] = counts.get("bad_finish", 0) + 1
        except asyncio.CancelledError:
            code = "CANCELLED"
        except grpc.aio.AioRpcError as e:
            code = e.code().name
        key = f"{kind}:{code}"
        counts[key] = counts.get(key, 0) + 1

    i = 0
    next_t = time.monotonic()
    while time.monotonic() < stop_at:
        next_t += rng.expovariate(args.rate)
        await asyncio.sleep(max(0.0, next_t - time.monotonic()))
        t = asyncio.create_task(one(i))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        i += 1
    await asyncio.gather(*tasks)
    for c in chans:
        await c.close()
    return i


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.path.join(ROOT, ".bazel-root/bin/server/flover_server"))
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--vocab", type=int, default=512, help="token ids are drawn below this")
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--warmup", type=float, default=300, help="seconds before flatness is judged")
    ap.add_argument("--rate", type=float, default=40, help="requests per second (Poisson)")
    ap.add_argument("--interval", type=float, default=30, help="seconds between samples")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    proc = subprocess.Popen([args.server, f"--model={args.model}", "--listen=127.0.0.1:0",
                             "--threads=1", "--max_batch=32"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = proc.stdout.readline().strip()[len("listening on "):]
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    start = time.monotonic()
    samples = []
    counts = {}
    done = threading.Event()

    stats_stub = pb_grpc.FloverStub(grpc.insecure_channel(address))

    def sampler():
        while not done.wait(args.interval):
            s = sample(proc.pid)
            s["t"] = time.monotonic() - start
            st = stats_stub.GetStats(pb.GetStatsRequest(), timeout=30)
            samples.append(s)
            print(f"t={s['t']:6.0f} s  rss {s['rss_kib'] / 1024:7.1f} MiB  threads {s['threads']:3d}  "
                  f"fds {s['fds']:3d}  in flight {st.queue_length + st.active_sequences:4d}  "
                  f"requests so far {sum(counts.values())}", flush=True)

    th = threading.Thread(target=sampler)
    th.start()
    sent = asyncio.run(load(address, args, counts, start + args.seconds))
    done.set()
    th.join()

    deadline = time.monotonic() + 60
    while True:
        st = stats_stub.GetStats(pb.GetStatsRequest(), timeout=30)
        if (st.queue_length, st.active_sequences) == (0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    finished = dict(st.requests_finished)
    failures = []
    if sum(finished.values()) != st.requests_submitted or st.active_sequences or st.queue_length:
        failures.append(f"accounting: submitted {st.requests_submitted}, finished {finished}, "
                        f"queued {st.queue_length}, running {st.active_sequences}")
    if counts.get("bad_finish"):
        failures.append(f"{counts['bad_finish']} OK streams without exactly one finish message")
    after = [s for s in samples if s["t"] >= args.warmup]
    if len(after) < 3:
        failures.append("too few samples after warm-up to judge")
    else:
        t = [s["t"] / 60 for s in after]
        half = len(after) // 2
        for key, limit in (("rss_kib", 2048), ("threads", 0), ("fds", 0)):
            v = [s[key] for s in after]
            slope = statistics.linear_regression(t, v).slope if len(set(v)) > 1 else 0.0
            growth = max(v[half:]) - max(v[:half])
            print(f"{key}: after warm-up min {min(v)} max {max(v)} last {v[-1]}; first half's "
                  f"max {max(v[:half])}, second half's {max(v[half:])}; slope {slope:.1f} per minute")
            # Flat: the second half of the run after warm-up never goes
            # above the first half's high-water mark by more than `limit`
            # (2 MiB of RSS; not one thread or fd). A leak grows through
            # both halves; a load burst (more requests in flight, glibc
            # keeping the arena) raises the mark once and stays.
            if growth > limit:
                failures.append(f"{key}: the second half rose {growth} above the first's maximum")
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    if code != 0:
        failures.append(f"server exited {code}")
    print(f"soak: {args.seconds:.0f} s at {args.rate}/s, {sent} requests; the clients saw "
          f"{dict(sorted(counts.items()))}")
    print(f"the server took {st.requests_submitted}, finished {finished}, steps {st.steps}")
    for f in failures:
        print("FAIL:", f)
    print("soak: PASS" if not failures else "soak: FAIL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
