#!/usr/bin/env python3
"""Speculative decoding (n-gram drafts, verified in the fused step) against
plain decoding on one flover_server, and llama.cpp's llama-server beside it
in each of its draftless speculative modes, in one sitting.

Two kinds of chats, built here from this repository's own files:
  grounded  each carries a source text of a few hundred words (a section of
            README.md or docs/*.md, a C++ function from engine/ or server/)
            and asks to repeat it with a small change, quote lines or list
            what it mentions, rename an identifier and return the whole code,
            or summarise quoting heavily: answers that copy their prompt,
            where prompt lookup drafts well;
  open      no source text ("Write a short story about...", "Explain
            why..."): little to copy, drafts rarely found.
Greedy (temperature 0), max_tokens fixed (replies may end earlier; they are
the same replies in both modes). At concurrency C a run sends bursts of C
chats at once (the kind's chats in order, cycling, until every chat went
once), so every concurrency sees the same chats.

Flover: one server with --speculative=ngram (or, with --draft_model=PATH
[--draft_dtype=D], --speculative=draft: that model drafts); each run goes
once with the request extension `"speculative": false` (off) and once
without (on), on
the same process, the order alternating each round (--separate_servers
sends the off runs to a second server started with --speculative=off).
Per kind and concurrency: output tokens/s off and on (generated tokens over
the run's wall time, prompt processing included) and their ratio (medians
over rounds), the decode rate per stream (replies are streamed: tokens
after each reply's first over the time from its first token to its last;
speculation changes this phase only), the drafts' acceptance (accepted / draft tokens) and
tokens per engine step (output tokens / flover_steps_total), from /metrics
deltas over all rounds, and a check that every reply is the same text with
speculation on and off (any that is not is counted and printed loudly).

With --llama_server=BIN: llama-server on the same GGUF file, the same
chats and concurrencies, one slot per chat of the largest burst, --jinja,
once without speculation and once per speculative mode its --help lists
that needs no draft model (ngram-simple, ngram-map-k, ngram-map-k4v,
ngram-mod, ngram-cache in the build at hand; draft-simple too with
--llama_draft_model), each at its defaults, and ngram-simple once more at
Flover's scale (a 4-token key, 8-token drafts; --llama_spec_args replaces
that variant with others). Each llama-server run gets a fresh process
(ngram-mod's hash pool, shared by all slots, and ngram-cache's per-slot
statistics outlive requests and would otherwise learn the answers of earlier
rounds), taking turns with Flover's runs in each round.
Its replies are checked against its own off run the same way; Flover-on is
set against llama-server's best configuration per kind and concurrency.

Flover runs with --prefix_caching=false by default: the same prompts go to
one process in both modes, and a prefix cache would favour whichever mode
runs second (and Flover against llama-server's fresh processes).

    tools/bazelw build //server:flover_server
    .venv-test/bin/python benchmarks/speculative_decoding.py \\
        [--model=models/SmolLM2-135M-Instruct.Q4_1.gguf] [--concurrency=1,8,32] \\
        [--kinds=grounded,open] [--max_tokens=256] [--rounds=3] [--threads=2] \\
        [--separate_servers] [--llama_server=$PERF/llama.cpp/build-native/bin/llama-server]

The client (the official `openai` package, AsyncOpenAI, non-streamed) runs
on the same cores as the servers, equally for all."""
import argparse
import asyncio
import collections
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai

from chat_serving import free_port, wait_ready  # this folder's llama-server helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, ".bazel-root/bin/server/flover_server")

# ---------------------------------------------------------------- workload

OPEN_PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky is blue to a ten-year-old.",
    "Write a short story about a robot learning to bake bread.",
    "Explain why leaves change colour in autumn.",
    "Give me five tips for staying focused while studying.",
    "Write a poem about the sea at night.",
    "Explain why exercise is good for the brain.",
    "Write a short story about two friends lost in a forest.",
    "Describe a perfect day in a small mountain village.",
    "Explain why we have seasons on Earth.",
    "Write a letter to a friend about your first week at a new job.",
    "What are the pros and cons of working from home?",
    "Write a short story about a cat who wants to become a detective.",
    "Explain why bread rises when it is baked.",
    "Describe how to plan a simple vegetable garden.",
    "Write a short story about a time traveller who misses the bus.",
    "Explain why the moon has phases.",
    "Give advice to someone learning to play the guitar.",
    "Write a short dialogue between a teacher and a curious student about volcanoes.",
    "Explain why honey never spoils.",
    "Write a short story about a dragon who is afraid of fire.",
    "Describe the life cycle of a butterfly.",
    "Explain why it is important to sleep well.",
    "Write a short story about a girl who builds a kite that can fly to the clouds.",
    "What makes a good friend? Explain in a few paragraphs.",
    "Explain why ice floats on water.",
    "Write a short story about an old clock that stops at midnight.",
    "Describe the city of the future as you imagine it.",
    "Explain why some birds migrate south in winter.",
    "Write a short story about a chef who loses his sense of taste.",
    "Give me ideas for a rainy weekend with children.",
    "Explain why recycling matters, with examples.",
]

PROSE_TASKS = [
    "Repeat the text below exactly as it is, word for word, except that every occurrence of "
    "the word \"{w}\" is written in capital letters.",
    "Quote every sentence of the text below that contains the word \"{w}\", exactly as written, "
    "one per line, each line starting with \"> \".",
    "Summarise the text below in a few bullet points. Quote its own words heavily: each bullet "
    "should be mostly an exact quotation in double quotes.",
    "List every name, number, flag and technical term the text below mentions, as a bulleted "
    "list, copying each exactly as written.",
]
CODE_TASKS = [
    "Rename `{w}` to `{w}_v2` everywhere in the C++ code below. Return the whole code, "
    "otherwise unchanged, in one ```cpp block.",
    "Quote every line of the C++ code below that contains `{w}`, exactly as written, one per line.",
    "Add a one-line `//` comment above each `if` statement of the C++ code below saying what it "
    "checks. Return the whole code, otherwise unchanged, in one ```cpp block.",
    "Explain the C++ code below step by step, quoting each line exactly before you explain it.",
]
# llama-server's ngram-simple at Flover's scale (its defaults look up 12
# tokens and draft 48, made for long repeats): a 4-token key, 8-token drafts.
LLAMA_TUNED = "ngram-simple-n4m8:--spec-type ngram-simple --spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 8"
DOC_FILES = ["README.md", "docs/architecture.md", "docs/serving.md", "docs/reliability.md",
             "docs/performance.md", "docs/api.md", "docs/operations.md", "docs/models.md",
             "docs/gpu.md", "docs/adding-a-model.md", "docs/adding-a-backend.md"]
CODE_FILES = ["engine/scheduler.cc", "engine/sampler.cc", "engine/speculation.cc", "engine/kv_blocks.cc",
              "engine/logits_processors.cc", "engine/grammar_constraint.cc", "engine/engine.cc",
              "server/openai_request.cc", "engine/choice_constraint.cc", "tokenizer/hf_bpe.cc",
              "chat/tool_calls.cc", "util/byte_size.cc", "server/json_body.cc"]
STOP = set("about above after again against being below between could doesn during every their there "
           "these those through under until which while would where other since still should".split())
CPP_WORDS = set("const return auto static void bool true false nullptr this while else break continue "
                "struct class case switch default char float double size_t int32_t int64_t uint8_t "
                "uint32_t uint64_t std absl vector string Status StatusOr Span span namespace "
                "include sizeof push_back back front begin end empty size data".split())


def _read(rel):
    try:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def doc_sections(per_file=1):
    """Sections of the docs (heading to next heading) without code blocks or
    tables, 150 to 400 words (cut at a paragraph), the first per file."""
    out = []
    for rel in DOC_FILES:
        sections, cur, fence = [], [], False
        for line in _read(rel).splitlines():
            if line.startswith("```"):
                fence = not fence
                continue
            if fence or line.lstrip().startswith("|") or line.startswith("<"):
                continue
            if line.startswith("#"):
                sections.append(cur)
                cur = []
                continue
            cur.append(line)
        sections.append(cur)
        taken = 0
        for lines in sections:
            paras = [p.strip() for p in "\n".join(lines).split("\n\n") if p.strip()]
            text, words = [], 0
            for p in paras:
                n = len(p.split())
                if words + n > 400:
                    break
                text.append(p)
                words += n
            if words >= 150:
                out.append((rel, "\n\n".join(text)))
                taken += 1
                if taken == per_file:
                    break
    return out


def cpp_functions(per_file=1):
    """Top-level function definitions (a line at column 0 that opens a body,
    up to the `}` at column 0), 15 to 90 lines, 120 to 450 words."""
    out = []
    for rel in CODE_FILES:
        lines = _read(rel).splitlines()
        taken, i = 0, 0
        while i < len(lines) and taken < per_file:
            line = lines[i]
            if (line and not line[0].isspace() and "(" in line and not line.startswith(("//", "#", "}", "namespace"))
                    and not line.rstrip().endswith(";")):
                # The opening brace, on this line or within the next three.
                j = next((k for k in range(i, min(i + 4, len(lines))) if lines[k].rstrip().endswith("{")), None)
                if j is not None:
                    end = next((k for k in range(j + 1, len(lines)) if lines[k] == "}"), None)
                    if end is not None:
                        body = "\n".join(lines[i:end + 1])
                        if 15 <= end + 1 - i <= 90 and 120 <= len(body.split()) <= 450:
                            out.append((f"{rel}:{i + 1}", body))
                            taken += 1
                        i = end + 1
                        continue
            i += 1
    return out


def frequent(text, code):
    if code:
        words = [w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", text) if w not in CPP_WORDS]
    else:
        words = [w for w in re.findall(r"[a-z]{5,}", text) if w not in STOP]
    if not words:
        return "the"
    counts = collections.Counter(words)
    best = max(counts.values())
    return next(w for w in words if counts[w] == best)


def grounded_chats():
    """Two tasks per source: 8 doc sections and 8 C++ functions make 32."""
    docs, code = doc_sections()[:8], cpp_functions()[:8]
    chats = []
    for i, (label, text) in enumerate(docs):
        for t in (i % 4, (i + 2) % 4):
            ask = PROSE_TASKS[t].format(w=frequent(text, False))
            chats.append((f"{label} / prose task {t}", f"{ask}\n\n---\n{text}\n---"))
    for i, (label, text) in enumerate(code):
        for t in (i % 4, (i + 2) % 4):
            ask = CODE_TASKS[t].format(w=frequent(text, True))
            chats.append((f"{label} / code task {t}", f"{ask}\n\n```cpp\n{text}\n```"))
    # Interleave prose and code so a short --tasks keeps both.
    prose, cpp = chats[:2 * len(docs)], chats[2 * len(docs):]
    chats = [c for pair in zip(prose, cpp) for c in pair] + prose[len(cpp):] + cpp[len(prose):]
    return chats, len(docs), len(code)


def workload(args):
    grounded, n_docs, n_code = grounded_chats()
    kinds = {"grounded": grounded, "open": [(f"open {i}", p) for i, p in enumerate(OPEN_PROMPTS)]}
    kinds = {k: v[:args.tasks] for k, v in kinds.items() if k in args.kinds}
    for k, v in kinds.items():
        if len(v) < 8:
            print(f"!! only {len(v)} {k} chats", file=sys.stderr)
    return kinds, n_docs, n_code


# ---------------------------------------------------------------- servers

def drain(stream):
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()


class Flover:
    def __init__(self, args, speculative, logdir):
        cmd = [args.server, f"--model={args.model}", "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
               "--metrics_listen=127.0.0.1:0", f"--threads={args.threads}",
               f"--max_batch={max(args.concurrency)}", f"--max_seq_len={args.max_seq_len}",
               f"--speculative={speculative}", f"--prefix_caching={'true' if args.prefix_caching else 'false'}"]
        if speculative == "draft":
            cmd += [f"--draft_model={args.draft_model}", f"--draft_dtype={args.draft_dtype}"]
        if args.num_speculative_tokens is not None:
            cmd.append(f"--num_speculative_tokens={args.num_speculative_tokens}")
        if args.speculative_max_rows is not None:
            cmd.append(f"--speculative_max_rows={args.speculative_max_rows}")
        cmd += shlex.split(args.server_args)
        self.cmd = cmd
        self.log = os.path.join(logdir, f"flover-{speculative}.log")
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        self.lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"flover_server exited ({self.proc.wait()}); see {self.log}")
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith("metrics on "):
                self.metrics = line[len("metrics on "):]
            elif line.startswith("openai api on "):
                self.base = line[len("openai api on "):]
            elif line.startswith("speculative decoding"):
                break
        drain(self.proc.stdout)
        self.client = openai.AsyncOpenAI(base_url=self.base, api_key="unused", max_retries=0, timeout=3600)

    def line(self, prefix):
        return next((x for x in self.lines if x.startswith(prefix)), "")

    def scrape(self):
        return scrape(self.metrics, {"steps": "flover_steps_total", "draft": "flover_spec_draft_tokens_total",
                                     "accepted": "flover_spec_accepted_tokens_total",
                                     "step_s": "flover_step_duration_seconds_sum"})

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def scrape(url, names):
    text = urllib.request.urlopen(url, timeout=60).read().decode()
    got = {k: 0.0 for k in names}
    by_name = {v: k for k, v in names.items()}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in by_name:
            got[by_name[name]] = float(value)
    return got


def llama_spec_types(binary):
    """The --spec-type values the build's --help lists ([] if none)."""
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"--spec-type\s+([a-z0-9,\-]+)", text)
    return [t for t in m.group(1).split(",") if t != "none"] if m else []


class Llama:
    """One llama-server process for one run (speculative state never carries over)."""

    def __init__(self, args, flags, logdir, name):
        port = free_port()
        slots = max(args.concurrency)
        self.cmd = [args.llama_server, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
                    "-np", str(slots), "-c", str(slots * args.max_seq_len), "--host", "127.0.0.1",
                    "--port", str(port), "--jinja", "--metrics"] + flags
        self.log = os.path.join(logdir, "llama-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".log")
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=err)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, self.proc)
        self.url = url
        # Retries: llama-server may close a kept-alive connection after a
        # streamed reply, and the next request on it fails before it is sent.
        self.client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=3, timeout=3600)

    def speculating(self):
        try:
            slots = json.loads(urllib.request.urlopen(self.url + "/slots", timeout=30).read())
            return bool(slots and slots[0].get("speculative"))
        except Exception:  # noqa: BLE001 - no /slots: unknown
            return None

    def scrape(self):
        return scrape(self.url + "/metrics", {"steps": "llamacpp:n_decode_total",
                                              "draft": "llamacpp:spec_decode_num_draft_tokens_total",
                                              "accepted": "llamacpp:spec_decode_num_accepted_tokens_total"})

    async def stop(self):
        await self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- runs

async def run(client, model, chats, c, max_tokens, extra):
    """Bursts of c chats at once, cycling, until every chat went once,
    streamed. Returns wall seconds, output tokens, texts, prompt tokens, and
    the decode phase: output tokens after each reply's first, and the time
    from its first token to its last (summed over replies)."""
    n = -(-max(len(chats), c) // c) * c
    order = [chats[i % len(chats)][1] for i in range(n)]

    async def one(prompt):
        t0 = time.perf_counter()
        first = None
        text, usage, finish = [], None, None
        stream = await client.chat.completions.create(
            model=model, max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": prompt}], extra_body=extra or None)
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content:
                    if first is None:
                        first = time.perf_counter()
                    text.append(ch.delta.content)
                if ch.finish_reason:
                    finish = ch.finish_reason
        end = time.perf_counter()
        return {"text": "".join(text), "tokens": usage.completion_tokens, "prompt": usage.prompt_tokens,
                "finish": finish, "decode_s": end - (first if first is not None else end), "start": t0}
    results = []
    wall = 0.0
    for b in range(0, n, c):
        t0 = time.perf_counter()
        results += await asyncio.gather(*(one(p) for p in order[b:b + c]))
        wall += time.perf_counter() - t0
    return {"wall": wall, "tokens": sum(r["tokens"] for r in results),
            "texts": [r["text"] for r in results],
            "prompt_tokens": [r["prompt"] for r in results],
            "decode_tokens": sum(max(0, r["tokens"] - 1) for r in results),
            "decode_s": sum(r["decode_s"] for r in results),
            "length": sum(r["finish"] == "length" for r in results), "n": n}


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return i


def cpu_line():
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = " ".join(x for x in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if x in flags)
    return (f"{datetime.date.today()}, {model} (/proc/cpuinfo), {os.cpu_count()} cores online, "
            f"{isa or 'no AVX2'}")


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--server", default=SERVER, help="flover_server binary")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--kinds", default="grounded,open")
    ap.add_argument("--tasks", type=int, default=32, help="most chats per kind (32 of each are built)")
    ap.add_argument("--max_tokens", type=int, default=256)
    ap.add_argument("--max_seq_len", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--num_speculative_tokens", type=int, help="Flover's flag (default: the server's)")
    ap.add_argument("--speculative_max_rows", type=int, help="Flover's flag (default: the server's)")
    ap.add_argument("--prefix_caching", action="store_true", help="leave Flover's prefix cache on")
    ap.add_argument("--server_args", default="", help="more flover_server flags, for both servers")
    ap.add_argument("--draft_model", help="Flover drafts with this model (--speculative=draft) instead of n-grams")
    ap.add_argument("--draft_dtype", default="auto", help="--draft_model's --draft_dtype")
    ap.add_argument("--separate_servers", action="store_true",
                    help="off runs on a second server started with --speculative=off")
    ap.add_argument("--llama_server", help="llama.cpp's llama-server binary: the peer, same file")
    ap.add_argument("--llama_modes", help="its --spec-type values to run (default: every draftless one "
                                          "its --help lists, plus draft-simple with --llama_draft_model)")
    ap.add_argument("--llama_spec_args", action="append", metavar="NAME:FLAGS",
                    help="one more llama-server configuration (repeatable; replaces the default, "
                         f"'{LLAMA_TUNED}'; an empty value: none)")
    ap.add_argument("--llama_draft_model", help="a GGUF draft model for llama-server's draft-simple")
    ap.add_argument("--show_tasks", action="store_true", help="print the chats and exit")
    args = ap.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.kinds = [k for k in args.kinds.split(",") if k]
    for k in args.kinds:
        if k not in ("grounded", "open"):
            ap.error(f"unknown kind {k}")
    kinds, n_docs, n_code = workload(args)
    if args.show_tasks:
        for k, chats in kinds.items():
            for label, prompt in chats:
                print(f"===== {k}: {label} ({len(prompt.split())} words)\n{prompt}\n")
        return 0

    # llama-server configurations: name -> flags.
    llama = {}
    llama_note = ""
    if args.llama_server:
        types = llama_spec_types(args.llama_server)
        draftless = [t for t in types if not t.startswith("draft")]
        wanted = args.llama_modes.split(",") if args.llama_modes else (
            draftless + (["draft-simple"] if args.llama_draft_model and "draft-simple" in types else []))
        llama["off"] = []
        for t in wanted:
            if t not in types:
                print(f"!! llama-server lists no --spec-type {t}; skipped", file=sys.stderr)
                continue
            flags = ["--spec-type", t]
            if t.startswith("draft"):
                if not args.llama_draft_model:
                    print(f"!! --spec-type {t} needs --llama_draft_model; skipped", file=sys.stderr)
                    continue
                flags += ["-md", args.llama_draft_model]
            llama[t] = flags
        if args.llama_spec_args is None:
            args.llama_spec_args = [LLAMA_TUNED] if "ngram-simple" in llama else []
        for item in args.llama_spec_args:
            name, _, flags = item.partition(":")
            if name:
                llama[name] = shlex.split(flags)
        skipped = [t for t in types if t not in llama]
        llama_note = ("its --spec-type values: " + (", ".join(types) if types else "none (no speculative "
                      "decoding in this build)") + (f"; not run: {', '.join(skipped)} (draft-* need a "
                      "draft model trained for the target, or --llama_draft_model)" if skipped else ""))

    logdir = tempfile.mkdtemp(prefix="specbench-")
    flover = Flover(args, "draft" if args.draft_model else "ngram", logdir)
    flover_off = Flover(args, "off", logdir) if args.separate_servers else None
    try:
        model = (await flover.client.models.list()).data[0].id
        warm = [("warm-up", "Say hello."), ("warm-up", "Count from one to five.")]
        for srv in (flover, flover_off):
            if srv:
                await run(srv.client, model, warm, 2, 8, None)

        print(f"# Speculative decoding: {cpu_line()}\n")
        print("command: " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable, ROOT)] + sys.argv)
              + "\n")
        print(f"Flover: {flover.line('device')}; {flover.line('speculative decoding')}; "
              f"{flover.line('KV cache')}")
        if flover_off:
            print("Flover off: a second server, --speculative=off")
        else:
            print("Flover off: the same server, requests with \"speculative\": false")
        if llama:
            print(f"llama-server: {args.llama_server}; {llama_note}")
        sources = f" ({n_docs} doc sections, {n_code} C++ functions, two tasks each)" if "grounded" in kinds else ""
        digest = hashlib.sha256("".join(p for v in kinds.values() for _, p in v).encode()).hexdigest()[:12]
        print(f"{os.path.basename(args.model)}; chats: " + ", ".join(f"{len(v)} {k}" for k, v in kinds.items())
              + f"{sources}, sha256 {digest}; greedy, max_tokens {args.max_tokens}, max_seq_len "
              f"{args.max_seq_len}, {args.threads} threads; concurrency {','.join(map(str, args.concurrency))} "
              f"(bursts of C at once until every chat went once); {args.rounds} rounds, runs alternating, "
              f"tokens/s medians, metrics summed over rounds\n", flush=True)

        # system -> (kind, c) -> list of run results (one per round).
        got = collections.defaultdict(lambda: collections.defaultdict(list))
        mism = collections.defaultdict(lambda: collections.defaultdict(int))  # system -> (kind, c) -> texts
        stats = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.Counter()))
        systems = ["flover-off", "flover-on"] + [f"llama:{n}" for n in llama]
        for r in range(args.rounds):
            for c in args.concurrency:
                for kind, chats in kinds.items():
                    order = systems if r % 2 == 0 else systems[::-1]
                    texts = {}
                    for system in order:
                        if system.startswith("flover"):
                            srv = flover_off if (system == "flover-off" and flover_off) else flover
                            extra = {"speculative": False} if system == "flover-off" and not flover_off else None
                            before = srv.scrape()
                            res = await run(srv.client, model, chats, c, args.max_tokens, extra)
                            after = srv.scrape()
                        else:
                            name = system.split(":", 1)[1]
                            srv = Llama(args, llama[name], logdir, name)
                            try:
                                if name != "off" and srv.speculating() is False:
                                    print(f"!! llama-server {name}: its /slots says speculative false",
                                          file=sys.stderr)
                                await run(srv.client, "x", warm, 2, 8, None)
                                before = srv.scrape()
                                res = await run(srv.client, "x", chats, c, args.max_tokens, None)
                                after = srv.scrape()
                            finally:
                                await srv.stop()
                        got[system][(kind, c)].append(res)
                        st = stats[system][(kind, c)]
                        for key in after:
                            st[key] += after[key] - before[key]
                        st["tokens"] += res["tokens"]
                        st["replies"] += res["n"]
                        st["length"] += res["length"]
                        texts[system] = res["texts"]
                        print(f"round {r + 1}, c={c}, {kind}, {system}: {res['tokens'] / res['wall']:.1f} tok/s",
                              file=sys.stderr, flush=True)
                    for system, ts in texts.items():
                        if system in ("flover-off", "llama:off"):
                            continue
                        base = texts["flover-off" if system.startswith("flover") else "llama:off"]
                        bad = [i for i in range(len(ts)) if ts[i] != base[i]]
                        mism[system][(kind, c)] += len(bad)
                        if bad and system == "flover-on":
                            i = bad[0]
                            print(f"!!!!! FLOVER: {len(bad)} of {len(ts)} replies DIFFER with speculation on vs off "
                                  f"({kind}, concurrency {c}, round {r + 1}); first: chat "
                                  f"{chats[i % len(chats)][0]!r} at char {first_difference(ts[i], base[i])}",
                                  flush=True)
                            print(f"!!!!!   off: {base[i][:300]!r}\n!!!!!   on:  {ts[i][:300]!r}", flush=True)

        med = lambda system, key: statistics.median(  # noqa: E731
            x["tokens"] / x["wall"] for x in got[system][key])
        # Per stream, from each reply's first token to its last.
        med_decode = lambda system, key: statistics.median(  # noqa: E731
            x["decode_tokens"] / x["decode_s"] if x["decode_s"] > 0 else 0.0 for x in got[system][key])

        def acc(st):
            return f"{st['accepted'] / st['draft']:.0%} of {st['draft']:.0f}" if st["draft"] else "no drafts"

        def per_step(st):
            return f"{st['tokens'] / st['steps']:.2f}" if st["steps"] else "-"

        print("## Flover: speculation off and on\n")
        print("| kind | concurrency | off tok/s | on tok/s | on / off | decode tok/s per stream off / on | "
              "decode on / off | accepted of draft tokens | "
              "tokens/step off | tokens/step on | ms/step off / on | reply tokens (mean, hit max) | "
              "texts differing |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        total_bad = 0
        for kind in kinds:
            for c in args.concurrency:
                key = (kind, c)
                off, on = med("flover-off", key), med("flover-on", key)
                so, sn = stats["flover-off"][key], stats["flover-on"][key]
                ms = lambda st: f"{st['step_s'] / st['steps'] * 1e3:.1f}" if st["steps"] else "-"  # noqa: E731
                bad = mism["flover-on"][key]
                total_bad += bad
                doff, don = med_decode("flover-off", key), med_decode("flover-on", key)
                print(f"| {kind} | {c} | {off:.1f} | {on:.1f} | {on / off:.2f} | {doff:.1f} / {don:.1f} | "
                      f"{don / doff if doff else 0:.2f} | {acc(sn)} | {per_step(so)} | "
                      f"{per_step(sn)} | {ms(so)} / {ms(sn)} | {sn['tokens'] / sn['replies']:.0f}, "
                      f"{sn['length'] / sn['replies']:.0%} | {bad if not bad else f'**{bad}**'} of "
                      f"{sn['replies']:.0f} |")
        print()
        for kind in kinds:
            pt = [n for x in got["flover-on"][(kind, args.concurrency[0])] for n in x["prompt_tokens"]]
            print(f"{kind}: prompt tokens per chat (Flover's count) mean {statistics.mean(pt):.0f}, "
                  f"max {max(pt)}")
        print()
        if total_bad:
            print(f"!!!!! FLOVER: {total_bad} replies differ between speculation on and off (must be 0)\n")
        else:
            print("Every Flover reply was the same text with speculation on and off.\n")

        if llama:
            print("## llama-server: each configuration (a fresh process per run)\n")
            print("flags: " + "; ".join(f"{n}: {' '.join(f) or '(none)'}" for n, f in llama.items()) + "\n")
            print("| kind | concurrency | configuration | tok/s | vs its off | accepted of draft tokens | "
                  "tokens/decode | reply tokens (mean, hit max) | texts differing from its off |")
            print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
            best = {}
            for kind in kinds:
                for c in args.concurrency:
                    key = (kind, c)
                    base = med("llama:off", key)
                    for n in llama:
                        s = f"llama:{n}"
                        t = med(s, key)
                        st = stats[s][key]
                        if key not in best or t > best[key][1]:
                            best[key] = (n, t)
                        diff = "-" if n == "off" else f"{mism[s][key]} of {st['replies']:.0f}"
                        print(f"| {kind} | {c} | {n} | {t:.1f} | {t / base:.2f} | "
                              f"{'-' if n == 'off' else acc(st)} | {per_step(st)} | "
                              f"{st['tokens'] / st['replies']:.0f}, {st['length'] / st['replies']:.0%} | {diff} |")
            print()
            changed = {n: sum(mism[f'llama:{n}'].values()) for n in llama if n != "off"}
            print("llama-server replies that changed against its own off run: "
                  + (", ".join(f"{n} {v}" for n, v in changed.items()) or "-") + "\n")
            print("## Flover against llama-server's best configuration\n")
            print("| kind | concurrency | Flover off | Flover on | llama-server off | llama-server best | "
                  "Flover on / llama best |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for kind in kinds:
                for c in args.concurrency:
                    key = (kind, c)
                    on = med("flover-on", key)
                    n, t = best[key]
                    print(f"| {kind} | {c} | {med('flover-off', key):.1f} | {on:.1f} | "
                          f"{med('llama:off', key):.1f} | {t:.1f} ({n}) | {on / t:.2f} |")
            print()
        shutil.rmtree(logdir, ignore_errors=True)  # the servers' logs, kept after a failure
        return 1 if total_bad else 0
    finally:
        for srv in (flover, flover_off):
            if srv:
                srv.stop()
        if os.path.isdir(logdir):
            print(f"servers' logs: {logdir}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
