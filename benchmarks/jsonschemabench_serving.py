#!/usr/bin/env python3
"""JSONSchemaBench's real-world schemas as constrained chat requests, the same
ones to flover_server and to llama.cpp's llama-server on one GGUF file (the
servers one after the other, never at once). Each schema is a
/v1/chat/completions request with `response_format` json_schema (strict
false), greedy, max_tokens fixed; every answer is sorted into one of:

- valid: finished (finish_reason stop) and its text parses as JSON and
  validates against the schema (python `jsonschema`: the validator for the
  schema's `$schema`, Draft 2020-12 if none, with `FormatChecker()`; the
  `jsonschema[format-nongpl]` extras make it check date-time, uri, hostname
  and the rest);
- refused: the server answered 4xx for the request (a schema it will not
  compile or enforce);
- truncated: finish_reason length (cut at max_tokens; cannot be validated);
- invalid: finished, but does not parse or fails validation;
- unchecked: finished and parses, but the validator itself failed (a
  `pattern` Python's `re` cannot compile, an unresolvable `$ref`);
- errors: a 5xx, a dropped connection or a timeout: must be 0.

Printed per category and overall, per server, with the median latency per
request (p50, s) and output tokens/s over the server's whole run (all
completion tokens over the wall time from first request to last answer).

Data: JSONSchemaBench (https://huggingface.co/datasets/epfl-dlab/JSONSchemaBench,
one schema per file under DATA/<Category>/*.json). Per category
--per_category files are sampled by a seeded hash of the file name
(sha256 of "SEED:NAME", smallest first): stable as files are added, and not
the first N in name order.

Prompt: the local JSONSchemaBench copy holds no prompt of the benchmark's
own (its maskbench test generator's prompt asks for test data, not
answers), so each request is one user message, "You need to generate a
JSON object that matches the schema below.\\n\\n" followed by the schema as
compact one-line JSON (json.dumps, ensure_ascii=False): the instruction of
the JSONSchemaBench paper, without its few-shot examples. The same messages
go to both servers.

    tools/bazelw build //server:flover_server
    (tools/setup.sh puts openai and jsonschema in .venv-test; format checks
    need .venv-test/bin/pip install "jsonschema[format-nongpl]==4.26.0")
    .venv-test/bin/python benchmarks/jsonschemabench_serving.py \\
        [--servers=flover,flover_extra,llama] [--llama_server=/work/peers/llama.cpp/build/bin/llama-server] \\
        [--data=/work/scratch/jsb/data] [--categories=Glaiveai2K,Github_easy,Github_medium,Snowplow] \\
        [--per_category=25] [--seed=0] [--max_tokens=500] [--concurrency=8] [--threads=2] \\
        [--ctx=8192] [--model=models/SmolLM2-135M-Instruct.Q4_1.gguf] \\
        [--flover_extra='{"max_string_length": 256}'] [--top_logprobs=0] [--out=answers.json]

Flover runs with --max_batch=CONCURRENCY and --max_seq_len=CTX; llama-server
with -np CONCURRENCY -c CONCURRENCY*CTX (CTX positions per slot), --jinja
(the GGUF's chat template, as Flover uses it), -t/-tb THREADS.
--servers may also name flover_extra: Flover again (a fresh server), with
--flover_extra merged into every request's body (openai's extra_body), e.g.
the string limits {"max_string_length": 256, "max_string_repeats": 4}.
The machine's roofline (model_benchmark on the same file) is printed last.
--top_logprobs=K asks both servers for logprobs with K alternatives per
token (kept in --out; Flover's are of the masked distribution, llama-server's
of the raw one unless a request sets its post_sampling_probs). The two do not
constrain alike: llama-server (common/json-schema-to-grammar.cpp) allows
whitespace between tokens, writes required properties first, forbids
properties a schema leaves unmentioned, and under --jinja lets the answer
sit in a ```json fence that it strips from the content
(common/chat-auto-parser-generator.cpp); Flover writes compact JSON in the
schema's property order and allows additional properties unless the schema
forbids them (docs/api.md, "Constrained output"). --out writes every answer (category, schema file,
server, status, HTTP status, finish_reason, text, validation error, latency,
tokens, prompt tokens) as one JSON list, for diffing the two servers' answers.

The client (the official `openai` package, AsyncOpenAI) runs on the same
cores as the servers, equally for both."""
import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

import jsonschema
import openai

from chat_serving import free_port, stop, wait_ready  # this folder's server helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, ".bazel-root/bin/server/flover_server")
INSTRUCTION = "You need to generate a JSON object that matches the schema below.\n\n"
STATUSES = ["valid", "refused", "truncated", "invalid", "unchecked", "errors"]


def sample(data, categories, per_category, seed):
    """[(category, file name, schema)], per category the per_category names of
    smallest sha256("seed:name")."""
    picked = []
    for cat in categories:
        names = sorted(n for n in os.listdir(os.path.join(data, cat)) if n.endswith(".json"))
        names.sort(key=lambda n: hashlib.sha256(f"{seed}:{n}".encode()).hexdigest())
        for name in sorted(names[:per_category]):
            with open(os.path.join(data, cat, name), encoding="utf-8") as f:
                picked.append((cat, name, json.load(f)))
    return picked


def messages_for(schema):
    return [{"role": "user", "content": INSTRUCTION + json.dumps(schema, ensure_ascii=False)}]


def check(schema, text):
    """(status, error): valid, invalid or unchecked for a finished answer."""
    try:
        value = json.loads(text)
    except ValueError as e:
        return "invalid", f"not JSON: {e}"
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = cls(schema, format_checker=jsonschema.FormatChecker())
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except Exception as e:  # noqa: BLE001 - a schema the validator cannot run
        return "unchecked", f"validator failed: {type(e).__name__}: {e}"
    if error is None:
        return "valid", None
    return "invalid", f"{error.message} at {error.json_path}"


def ready(proc, url):
    try:
        wait_ready(url, proc)
    except SystemExit:
        proc.kill()
        proc.wait()
        raise
    return proc, url


def start_flover(args):
    port = free_port()
    proc = subprocess.Popen([SERVER, f"--model={args.model}", f"--threads={args.threads}",
                             f"--max_batch={args.concurrency}", f"--max_seq_len={args.ctx}",
                             "--listen=127.0.0.1:0", f"--http_listen=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return ready(proc, f"http://127.0.0.1:{port}")


def start_llama(args):
    port = free_port()
    env = dict(os.environ)
    bin_dir = os.path.dirname(os.path.abspath(args.llama_server))
    env["LD_LIBRARY_PATH"] = bin_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    proc = subprocess.Popen([args.llama_server, "-m", args.model, "-t", str(args.threads),
                             "-tb", str(args.threads), "-np", str(args.concurrency),
                             "-c", str(args.concurrency * args.ctx), "--jinja",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return ready(proc, f"http://127.0.0.1:{port}")


async def ask(client, model, args, server, cat, name, schema, gate):
    kw = {}
    if args.top_logprobs:
        kw.update(logprobs=True, top_logprobs=args.top_logprobs)
    if server == "flover_extra":
        kw["extra_body"] = args.flover_extra
    rec = {"category": cat, "schema": name, "server": server, "status": None, "http_status": 200,
           "finish_reason": None, "text": None, "error": None, "latency_s": None, "tokens": 0,
           "prompt_tokens": None}
    async with gate:
        sent = time.monotonic()
        try:
            r = await client.chat.completions.create(
                model=model, messages=messages_for(schema), max_tokens=args.max_tokens, temperature=0,
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "answer", "schema": schema, "strict": False}},
                **kw)
        except openai.APIStatusError as e:
            rec["http_status"] = e.status_code
            rec["status"] = "refused" if 400 <= e.status_code < 500 else "errors"
            rec["error"] = str(e)[:2000]
        except Exception as e:  # noqa: BLE001 - connection drops, timeouts
            rec["http_status"] = None
            rec["status"] = "errors"
            rec["error"] = f"{type(e).__name__}: {e}"
        rec["latency_s"] = time.monotonic() - sent
    if rec["status"] is not None:
        return rec
    choice = r.choices[0]
    rec["finish_reason"] = choice.finish_reason
    rec["text"] = choice.message.content or ""
    if r.usage:
        rec["tokens"], rec["prompt_tokens"] = r.usage.completion_tokens, r.usage.prompt_tokens
    if args.top_logprobs and choice.logprobs and choice.logprobs.content:
        rec["logprobs"] = [{"token": t.token, "logprob": t.logprob,
                            "top": [(a.token, a.logprob) for a in t.top_logprobs]}
                           for t in choice.logprobs.content]
    if choice.finish_reason == "length":
        rec["status"] = "truncated"
    elif choice.finish_reason == "stop":
        rec["status"], rec["error"] = check(schema, rec["text"])
    else:
        rec["status"], rec["error"] = "errors", f"finish_reason {choice.finish_reason}"
    return rec


async def run_server(url, args, server, picked):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                timeout=args.timeout_s)
    model = (await client.models.list()).data[0].id
    gate = asyncio.Semaphore(args.concurrency)
    t0 = time.monotonic()
    recs = await asyncio.gather(*(ask(client, model, args, server, c, n, s, gate) for c, n, s in picked))
    wall = time.monotonic() - t0
    await client.close()
    return recs, wall


def roofline(args):
    """The machine's roofline, from model_benchmark on the same file."""
    cmd = [os.path.join(ROOT, ".bazel-root/bin/benchmarks/model_benchmark"), f"--model={args.model}",
           f"--threads={args.threads}", "--prefill_lengths=512", "--decode_batches=1", "--repeats=1"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    at = out.find("Roofline")
    return out[at:].strip() if at >= 0 else "(model_benchmark printed no roofline)"


def table(recs, walls, servers, categories):
    print("| category | server | n | " + " | ".join(STATUSES) + " | p50 latency s | tokens/s |")
    print("|---|---|---:|" + "---:|" * len(STATUSES) + "---:|---:|")
    for cat in categories + ["overall"]:
        for server in servers:
            rows = [r for r in recs if r["server"] == server and (cat == "overall" or r["category"] == cat)]
            if not rows:
                continue
            counts = [sum(r["status"] == s for r in rows) for s in STATUSES]
            p50 = statistics.median(r["latency_s"] for r in rows)
            tps = (f"{sum(r['tokens'] for r in rows) / walls[server]:.1f}" if cat == "overall" else "")
            label = f"**{cat}**" if cat == "overall" else cat
            print(f"| {label} | {server} | {len(rows)} | " + " | ".join(map(str, counts))
                  + f" | {p50:.2f} | {tps} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--data", default="/work/scratch/jsb/data")
    ap.add_argument("--categories", default="Glaiveai2K,Github_easy,Github_medium,Snowplow")
    ap.add_argument("--per_category", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max_tokens", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192, help="positions per sequence (prompt + answer)")
    ap.add_argument("--servers", default="flover,llama")
    ap.add_argument("--llama_server", default="/work/peers/llama.cpp/build/bin/llama-server")
    ap.add_argument("--flover_extra", type=json.loads, default=None,
                    help="a JSON object merged into every Flover request body")
    ap.add_argument("--top_logprobs", type=int, default=0)
    ap.add_argument("--timeout_s", type=float, default=1800)
    ap.add_argument("--out", help="write every answer here (a JSON list)")
    args = ap.parse_args()
    args.model = os.path.abspath(args.model)
    categories = args.categories.split(",")
    if args.flover_extra is not None and not isinstance(args.flover_extra, dict):
        sys.exit("--flover_extra must be a JSON object")
    servers = args.servers.split(",")
    for s in servers:
        if s not in ("flover", "flover_extra", "llama"):
            sys.exit(f"unknown server {s!r} (flover, flover_extra, llama)")
    if "flover_extra" in servers and not args.flover_extra:
        sys.exit("flover_extra needs --flover_extra")
    picked = sample(args.data, categories, args.per_category, args.seed)
    print(f"# {os.path.basename(args.model)}: {len(picked)} schemas ({args.per_category} per category, "
          f"seed {args.seed}), greedy, max_tokens {args.max_tokens}, concurrency {args.concurrency}, "
          f"{args.threads} threads" + (f", Flover extra {json.dumps(args.flover_extra)}"
                                       if args.flover_extra else ""), flush=True)
    recs, walls = [], {}
    for server in servers:
        proc, url = (start_llama if server == "llama" else start_flover)(args)
        try:
            got, walls[server] = asyncio.run(run_server(url, args, server, picked))
        finally:
            stop(proc)
        recs += got
        print(f"# {server}: {walls[server]:.1f} s", flush=True)
    print()
    table(recs, walls, servers, categories)
    print()
    print(roofline(args))
    errors = [r for r in recs if r["status"] == "errors"]
    for r in errors[:10]:
        print(f"!! {r['server']} {r['category']}/{r['schema']}: {r['http_status']} {r['error'][:300]}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(recs, f, indent=1, ensure_ascii=False)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
