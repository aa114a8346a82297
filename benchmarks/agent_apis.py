#!/usr/bin/env python3
"""Served throughput through Anthropic's Messages API (/v1/messages) and
OpenAI's Responses API (/v1/responses) against /v1/chat/completions, on one
flover_server with SmolLM2-135M-Instruct, the same chats through each
(greedy, so the same replies, token for token), streamed and not: a burst
of --concurrency chats at once, the APIs taking turns within each round.
Output tokens/s (each reply's tokens, from its usage, over the burst's wall
time) and the ratio to chat completions, medians of --rounds.

Also the reply reader's cost per token (chat/reply_reader.h): the server's
replies re-read here would measure Python, so that part is
benchmarks/reply_reader_benchmark (C++), run beside it.

    tools/bazelw build //server:flover_server //benchmarks:reply_reader_benchmark
    .venv-test/bin/python benchmarks/agent_apis.py [--concurrency=8] [--rounds=3] [--max_tokens=64]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_memory import Server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_FILE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL = "SmolLM2-135M-Instruct.Q4_1"
QUESTIONS = ["What is the capital of France?", "Explain why the sky is blue.", "Write a haiku about rain.",
             "How do plants make food?", "Name three prime numbers.", "What is a black hole?",
             "Describe a cat in one sentence.", "Why do we sleep?", "What is gravity?", "Tell me about Paris.",
             "How does a rainbow form?", "What is water made of?", "Who wrote Hamlet?", "What is DNA?",
             "Give me a tip for studying.", "What is the speed of light?"]


def body(api, question, n, stream):
    if api == "chat":
        return "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": question}],
                                        "max_tokens": n, "temperature": 0, "stream": stream,
                                        "stream_options": {"include_usage": True} if stream else None}
    if api == "messages":
        return "/v1/messages", {"model": MODEL, "messages": [{"role": "user", "content": question}],
                                "max_tokens": n, "temperature": 0, "stream": stream}
    return "/v1/responses", {"model": MODEL, "input": question, "max_output_tokens": n, "temperature": 0,
                             "stream": stream, "store": False}


def one(hostport, api, question, n, stream):
    path, b = body(api, question, n, stream)
    conn = http.client.HTTPConnection(hostport, timeout=300)
    conn.request("POST", path, body=json.dumps({k: v for k, v in b.items() if v is not None}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read().decode()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{api}: {resp.status} {data[:200]}")
    if not stream:
        u = json.loads(data)["usage"]
        return u.get("completion_tokens", u.get("output_tokens"))
    tokens = 0
    for line in data.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        e = json.loads(line[6:])
        u = e.get("usage") or (e.get("response") or {}).get("usage")
        if api == "chat" and u:
            tokens = u["completion_tokens"]
        elif api == "messages" and e.get("type") == "message_delta":
            tokens = e["usage"]["output_tokens"]
        elif api == "responses" and e.get("type") in ("response.completed", "response.incomplete"):
            tokens = u["output_tokens"]
    return tokens


def burst(hostport, api, c, n, stream):
    out = [0] * c
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, one(hostport, api, QUESTIONS[i % 16], n, stream)))
               for i in range(c)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(out), time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max_tokens", type=int, default=64)
    args = ap.parse_args()
    s = Server(f"--model={MODEL_FILE}", "--max_seq_len=1024", "--prefix_caching=false")
    hostport = s.http[len("http://"):]
    print(f"SmolLM2-135M-Instruct Q4_1, {args.concurrency} chats at once, {args.max_tokens} tokens at most, greedy, "
          f"{args.rounds} rounds (medians), 2 threads\n")
    print("| API | streamed | output tokens | tokens/s | vs chat completions |")
    print("|---|---|---:|---:|---:|")
    try:
        for stream in (False, True):
            rates, tokens = {}, {}
            apis = ["chat", "messages", "responses"]
            for r in range(args.rounds):
                for api in apis[r % 3:] + apis[:r % 3]:
                    t, wall = burst(hostport, api, args.concurrency, args.max_tokens, stream)
                    rates.setdefault(api, []).append(t / wall)
                    tokens[api] = t
            base = statistics.median(rates["chat"])
            for api in apis:
                m = statistics.median(rates[api])
                print(f"| {api} | {'yes' if stream else 'no'} | {tokens[api]} | {m:.1f} | {m / base:.3f}x |")
    finally:
        s.close()


if __name__ == "__main__":
    main()
