#!/usr/bin/env python3
"""Two of issue 56's image measurements on one server (vision_serving.py's
checkpoint and helpers; standard library only):

- the encoder cache: the same image chat twice, streaming; time to first
  token of the first (its tiles encoded, its prompt computed) and of the
  second (features kept by the image's hash, prompt blocks from the prefix
  cache);
- text-only neighbours under image load: time to first token of 3 short
  text chats sent one at a time, alone, then again while 4 image chats
  (distinct images) are being served.

  python3 benchmarks/vision_cache_and_neighbors.py --ckpt DIR [--flover-flags=--dtype=bf16] [--image-size 256]
  python3 benchmarks/vision_cache_and_neighbors.py --ckpt TEXT.gguf --mmproj MMPROJ.gguf --flover-flags=--dtype=bf16
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_serving as vs  # noqa: E402


def text_ttft(port, model):
    body = {"model": model, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 8,
            "temperature": 0, "stream": True}
    conn = vs.http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    ttft = None
    for line in r:
        line = line.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]" and ttft is None:
            ev = json.loads(line[6:])
            if any((c.get("delta") or {}).get("content") for c in ev.get("choices") or []):
                ttft = time.perf_counter() - t0
    conn.close()
    return ttft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--flover-bin", default=vs.FLOVER_BIN)
    ap.add_argument("--flover-flags", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=256, help="the square PNGs' side in pixels")
    ap.add_argument("--mmproj", default=None, help="llama.cpp's mmproj file beside a GGUF --ckpt (Qwen3-VL)")
    a = ap.parse_args()
    a.max_seq_len, a.n_parallel, a.nice, a.logdir = 2048, 16, 0, os.getcwd()
    port = vs.free_port()
    server = vs.flover_server(a, port)
    server.start()
    try:
        m = server.model
        vs.chat(port, m, vs.synth_image(100, a.image_size), 1)  # warm-up, another image
        png = vs.synth_image(200, a.image_size)
        miss = vs.chat_stream_ttft(port, m, png, 8)[0]
        hit = vs.chat_stream_ttft(port, m, png, 8)[0]
        alone = [text_ttft(port, m) for _ in range(3)]
        load = [threading.Thread(target=vs.chat, args=(port, m, vs.synth_image(300 + i, a.image_size), 16)) for i in range(4)]
        for t in load:
            t.start()
        time.sleep(0.5)
        loaded = [text_ttft(port, m) for _ in range(3)]
        for t in load:
            t.join()
    finally:
        server.stop()
    print(f"\n{a.ckpt}, flover_server {a.flover_flags or '(defaults)'}, {a.threads} threads\n")
    print("| measurement | time to first token |\n|---|---:|")
    print(f"| an image chat, first time (encode + prompt) | {miss:.2f} s |")
    print(f"| the same image chat again (cache hit) | {hit:.2f} s |")
    print(f"| a text chat, alone (median of 3) | {statistics.median(alone):.3f} s |")
    print(f"| a text chat while 4 image chats run (median of 3) | {statistics.median(loaded):.3f} s |")


if __name__ == "__main__":
    main()
