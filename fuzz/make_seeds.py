#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora under fuzz/corpus/ (committed; rerun to
regenerate). Small inputs on purpose: libFuzzer mutates them. Crashing
inputs found later are added beside the seeds by hand, named crash-*.

  python3 fuzz/make_seeds.py      (needs protoc, for the request seeds)
"""
import json
import os
import shutil
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def corpus(name):
    path = os.path.join(HERE, "corpus", name)
    os.makedirs(path, exist_ok=True)
    return path


def safetensors(tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes)."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def write(path, name, data):
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)


def main():
    s = corpus("safetensors")
    write(s, "f32_2x3", safetensors({"w": ("F32", [2, 3], struct.pack("<6f", *range(6)))}))
    write(s, "f16_bf16", safetensors({"a": ("F16", [4], struct.pack("<4H", 0x3C00, 0xC000, 0x7BFF, 1)),
                                      "b": ("BF16", [2, 2], struct.pack("<4H", 0x3F80, 0x4000, 0x7F7F, 0x8001))},
                                     {"format": "pt"}))
    write(s, "scalar_and_empty", safetensors({"s": ("F32", [], struct.pack("<f", 1.5)),
                                              "e": ("F32", [0, 4], b"")}))
    write(s, "int_tensor", safetensors({"i": ("I64", [2], struct.pack("<2q", 1, -1))}))

    c = corpus("config")
    for d in ("tiny_f32", "tiny_f16_prefix", "tiny_bf16_prefix", "llama_gqa", "llama_text",
              "llama_tied_sharded"):
        shutil.copy(os.path.join(ROOT, "tests/golden", d, "config.json"), os.path.join(c, d + ".json"))

    t = corpus("tokenizer")
    shutil.copy(os.path.join(ROOT, "tests/golden/hf_tokenizers/edge/tokenizer.json"),
                os.path.join(t, "edge_tokenizer.json"))
    texts = {
        "ascii": "Hello, world! The quick brown fox.",
        "spaces": "a  b\t\tc\n\n\n  d   ",
        "unicode": "héllo wörld 你好 🙂 Ελληνικά ﷽",
        "digits": "12345 678.9 0x1F",
        "specials": "<|endoftext|><s></s><unk> <|begin_of_text|>",
    }
    for name, text in texts.items():
        write(t, name, text.encode())
    write(t, "invalid_utf8", b"\xff\xfe\xc3\x28 \xe2\x82 \xf0\x9f\x98")

    r = corpus("request")
    requests = {
        "text": 'text: "Hello" stopping { max_new_tokens: 8 }',
        "ids": "token_ids { ids: [1, 2, 3] } sampling { temperature: 0 } stopping { ignore_eos: true }",
        "sampling": 'text: "x" sampling { temperature: 0.7 top_k: 40 top_p: 0.9 seed: 5 '
                    'repetition_penalty: 1.1 } stopping { max_new_tokens: 4 stop_token_ids: [50256] '
                    'stop_strings: ["\\n"] } request_id: "r1" return_logprobs: true',
        "limits": "token_ids { ids: [50256, 0] } sampling { top_k: -1 top_p: 0 } "
                  "stopping { max_new_tokens: -5 }",
    }
    proto = os.path.join(ROOT, "proto/flover.proto")
    for name, text in requests.items():
        out = subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--encode=flover.v1.GenerateRequest",
                              proto], input=text.encode(), capture_output=True, check=True).stdout
        write(r, name, out)


if __name__ == "__main__":
    main()
