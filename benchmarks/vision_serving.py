#!/usr/bin/env python3
"""Image-chat serving benchmark: Flover vs llama.cpp llama-server (--mmproj), same checkpoint.

Starts ONE server at a time (flover, then llama-server; never both), and for each:
  probe  one non-streaming image chat (fixed probe image, max_tokens 1): usage.prompt_tokens
         (also the warm-up)
  (a)    N_SINGLE single-image chats, one at a time, streaming: time from sending the request
         to the first non-empty content delta ("image-to-first-token"), median
  (b)    a burst of N_BURST image chats sent at once (distinct deterministic 256x256 PNGs),
         greedy, max_tokens 32: wall time, output tokens/s (sum of usage.completion_tokens / wall),
         requests/s
Same images, prompt and sampling settings for both servers. Prints a markdown table and
writes the raw numbers as JSON (--json).

Standard library only (PNGs are written with zlib), so any python3 works.

The files: a SmolVLM2-256M-shaped checkpoint with random weights
(benchmarks/make_smolvlm2_shape.py, in a venv with torch, transformers 5.x
and gguf), and llama.cpp's conversions of it (convert_hf_to_gguf.py DIR
--outtype f16, and again with --mmproj). With the processor's size 1024 and
splitting, both servers cut a 256-px image into 4 tiles and a global one
(320 image tokens each); at size 512 without splitting llama.cpp still cuts
one tile and the overview (128) where transformers and Flover use one (64).

  python3 benchmarks/vision_serving.py --ckpt DIR --text-gguf TEXT.gguf --mmproj MMPROJ.gguf \
      [--n-single 3] [--n-burst 16] [--max-tokens 32] [--json results.json]

Qwen3-VL-2B's shapes: both servers on the same files
(benchmarks/make_qwen3vl_shape_gguf.py OUT), Flover with --ckpt the text
GGUF (it then gets --mmproj too); 512-px images need no resizing on either:

  python3 benchmarks/vision_serving.py --ckpt TEXT.gguf --text-gguf TEXT.gguf --mmproj MMPROJ.gguf \
      --image-size 512 --flover-flags=--dtype=bf16
"""
import argparse
import base64
import http.client
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import threading
import time
import zlib

HERE = os.getcwd()
FLOVER_BIN = ".bazel-root/bin/server/flover_server"
LLAMA_BIN = "/work/peers/llama.cpp/build/bin/llama-server"
PROMPT = "What is in this image? Describe it."


# ----------------------------------------------------------------------------- images
def png_bytes(w, h, pixel):
    """RGB PNG from pixel(x, y) -> (r, g, b)."""
    raw = bytearray()
    for y in range(h):
        raw.append(0)  # filter: none
        for x in range(w):
            raw.extend(pixel(x, y))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(raw), 6)) + chunk(b"IEND", b""))


def synth_image(i, size=256):
    """Deterministic synthetic image number i: even i = coloured gradients, odd i = LCG noise blocks."""
    if i % 2 == 0:
        a, b, c = (37 * i) % 256, (91 * i + 40) % 256, (53 * i + 128) % 256

        def px(x, y):
            return ((x + a) % 256, (y + b) % 256, ((x * (i % 5 + 1) + y) // 2 + c) % 256)
        return png_bytes(size, size, px)
    state = [1103515245 * (i + 1) + 12345]
    blk = 4 + (i % 4) * 4
    cache = {}

    def px(x, y):
        key = (x // blk, y // blk)
        if key not in cache:
            s = (key[0] * 73856093) ^ (key[1] * 19349663) ^ state[0]
            for _ in range(2):
                s = (s * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
                s ^= s >> 29
            cache[key] = ((s >> 16) & 255, (s >> 28) & 255, (s >> 40) & 255)
        return cache[key]
    return png_bytes(size, size, px)


def data_url(png):
    return "data:image/png;base64," + base64.b64encode(png).decode()


# ----------------------------------------------------------------------------- HTTP
def request_body(model, png, max_tokens, stream):
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "top_p": 1.0, "seed": 0,
            "stream": stream,
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": data_url(png)}},
                {"type": "text", "text": PROMPT}]}]}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def post(port, path, body, timeout=1800):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def chat(port, model, png, max_tokens):
    conn, r = post(port, "/v1/chat/completions", request_body(model, png, max_tokens, False))
    data = r.read()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:500]!r}")
    return json.loads(data)


def chat_stream_ttft(port, model, png, max_tokens):
    """Returns (seconds to first non-empty content delta, total seconds, usage or None, text)."""
    t0 = time.perf_counter()
    conn, r = post(port, "/v1/chat/completions", request_body(model, png, max_tokens, True))
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:500]!r}")
    ttft, usage, text = None, None, []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        ev = json.loads(payload)
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(piece)
    total = time.perf_counter() - t0
    conn.close()
    return ttft, total, usage, "".join(text)


def get_json(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", path)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ----------------------------------------------------------------------------- servers
class Server:
    def __init__(self, name, argv, port, log_path, nice):
        self.name, self.argv, self.port, self.log_path = name, argv, port, log_path
        if nice:
            self.argv = ["nice", "-n", str(nice)] + self.argv
        self.proc = None

    def start(self, timeout=300):
        self.log = open(self.log_path, "w")
        print(f"[{self.name}] $ {' '.join(self.argv)}", flush=True)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            try:
                st, data = get_json(self.port, "/v1/models")
                if st == 200:
                    models = json.loads(data).get("data") or []
                    self.model = models[0]["id"] if models else "model"
                    self.load_s = time.perf_counter() - t0
                    print(f"[{self.name}] up in {self.load_s:.1f}s, model id {self.model!r}", flush=True)
                    return
            except (OSError, ValueError, http.client.HTTPException):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready after {timeout}s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None):
            self.log.close()


def flover_server(a, port):
    # A GGUF --ckpt (Qwen3-VL) takes llama.cpp's mmproj beside it, as llama-server does.
    mmproj = [f"--mmproj={a.mmproj}"] if a.ckpt.endswith(".gguf") and getattr(a, "mmproj", None) else []
    argv = [a.flover_bin, f"--model={a.ckpt}", f"--http_listen=127.0.0.1:{port}", "--listen=127.0.0.1:0",
            f"--threads={a.threads}", f"--max_seq_len={a.max_seq_len}", f"--max_batch={a.n_parallel}",
            *mmproj, *a.flover_flags.split()]
    return Server("flover", argv, port, os.path.join(a.logdir, "flover.log"), a.nice)


def llama_server(a, port):
    argv = [a.llama_bin, "-m", a.text_gguf, "--mmproj", a.mmproj, "--host", "127.0.0.1", "--port", str(port),
            "-t", str(a.threads), "-tb", str(a.threads), "-np", str(a.n_parallel),
            "-c", str(a.n_parallel * 1024), "--jinja"]
    return Server("llama.cpp", argv, port, os.path.join(a.logdir, "llama-server.log"), a.nice)


# ----------------------------------------------------------------------------- benchmark
def run_one(server, a, probe_png, single_pngs, burst_pngs):
    res = {"server": server.name}
    server.start()
    try:
        res["load_s"] = server.load_s
        m = server.model
        # probe / warm-up: same request to both servers
        t = time.perf_counter()
        r = chat(server.port, m, probe_png, 1)
        res["probe_s"] = time.perf_counter() - t
        res["prompt_tokens"] = r["usage"]["prompt_tokens"]
        print(f"[{server.name}] probe: prompt_tokens={res['prompt_tokens']} ({res['probe_s']:.2f}s)", flush=True)

        # (a) single image chats, one at a time, streaming
        ttfts, totals = [], []
        for i, png in enumerate(single_pngs):
            ttft, total, usage, text = chat_stream_ttft(server.port, m, png, a.max_tokens)
            ttfts.append(ttft if ttft is not None else float("nan"))
            totals.append(total)
            print(f"[{server.name}] single {i}: ttft={ttft if ttft is None else round(ttft, 3)}s "
                  f"total={total:.2f}s usage={usage} text={text[:40]!r}", flush=True)
        res["single_ttft_s"] = ttfts
        res["single_total_s"] = totals
        res["ttft_median_s"] = statistics.median(ttfts) if ttfts else float("nan")

        # (b) burst
        out = [None] * len(burst_pngs)
        err = []

        def worker(k):
            try:
                out[k] = chat(server.port, m, burst_pngs[k], a.max_tokens)
            except Exception as e:  # noqa: BLE001
                err.append(repr(e))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(burst_pngs))]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        if err:
            raise RuntimeError(f"{server.name} burst errors: {err[:3]}")
        ctoks = [o["usage"]["completion_tokens"] for o in out]
        ptoks = [o["usage"]["prompt_tokens"] for o in out]
        res.update(burst_n=len(burst_pngs), burst_wall_s=wall, burst_completion_tokens=sum(ctoks),
                   burst_prompt_tokens=sum(ptoks), burst_out_tok_s=sum(ctoks) / wall,
                   burst_req_s=len(burst_pngs) / wall,
                   burst_finish=[o["choices"][0].get("finish_reason") for o in out])
        print(f"[{server.name}] burst of {len(burst_pngs)}: wall={wall:.2f}s completion_tokens={ctoks} "
              f"prompt_tokens={ptoks}", flush=True)
    finally:
        server.stop()
    return res


def fmt(x, nd=2):
    return "n/a" if x is None or x != x else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=os.path.join(HERE, "ckpt"))
    ap.add_argument("--text-gguf", default=os.path.join(HERE, "text-f16.gguf"))
    ap.add_argument("--mmproj", default=os.path.join(HERE, "mmproj-f16.gguf"))
    ap.add_argument("--flover-bin", default=FLOVER_BIN)
    ap.add_argument("--llama-bin", default=LLAMA_BIN)
    ap.add_argument("--servers", default="flover,llama")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flover-flags", default="", help="more flover_server flags, e.g. --dtype=bf16")
    ap.add_argument("--n-parallel", type=int, default=16, help="flover --max_batch / llama -np")
    ap.add_argument("--max-seq-len", type=int, default=2048, help="flover --max_seq_len")
    ap.add_argument("--n-single", type=int, default=3)
    ap.add_argument("--n-burst", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=256)
    ap.add_argument("--nice", type=int, default=0, help="run the servers under nice -n N")
    ap.add_argument("--logdir", default=os.path.join(HERE, "logs"))
    ap.add_argument("--json", default=os.path.join(HERE, "results.json"))
    a = ap.parse_args()
    os.makedirs(a.logdir, exist_ok=True)

    probe_png = synth_image(1000, a.image_size)
    single_pngs = [synth_image(100 + i, a.image_size) for i in range(a.n_single)]
    burst_pngs = [synth_image(i, a.image_size) for i in range(a.n_burst)]
    assert len({p for p in burst_pngs + single_pngs + [probe_png]}) == a.n_burst + a.n_single + 1

    results = []
    for name in a.servers.split(","):
        port = free_port()
        srv = flover_server(a, port) if name == "flover" else llama_server(a, port)
        results.append(run_one(srv, a, probe_png, single_pngs, burst_pngs))

    print()
    print(f"image {a.image_size}x{a.image_size} PNG, prompt {PROMPT!r}, greedy, max_tokens {a.max_tokens}, "
          f"{a.threads} threads, {a.n_single} single chats, burst of {a.n_burst}")
    print()
    print("| server | prompt_tokens (same request) | image TTFT median (s) | burst wall (s) | "
          "burst completion tokens | output tok/s | req/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['server']} | {r['prompt_tokens']} | {fmt(r['ttft_median_s'], 3)} | {fmt(r['burst_wall_s'])} | "
              f"{r['burst_completion_tokens']} | {fmt(r['burst_out_tok_s'])} | {fmt(r['burst_req_s'], 3)} |")
    with open(a.json, "w") as f:
        json.dump({"args": vars(a), "results": results}, f, indent=2)
    print(f"\nraw numbers: {a.json}")


if __name__ == "__main__":
    main()
