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


def gguf(kv, tensors, alignment=32):
    """A GGUF v3 file. kv: key -> (type id, encoded payload); tensors: name ->
    (ggml type id, ne, raw bytes)."""
    def string(x):
        x = x.encode() if isinstance(x, str) else x
        return struct.pack("<Q", len(x)) + x
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, (vtype, payload) in kv.items():
        out += string(key) + struct.pack("<I", vtype) + payload
    offset, data = 0, b""
    for name, (ttype, ne, raw) in tensors.items():
        out += string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ttype, offset)
        padded = raw + b"\0" * (-len(raw) % alignment)
        data += padded
        offset += len(padded)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def gstr(x):
    x = x.encode()
    return 8, struct.pack("<Q", len(x)) + x


def gu32(v):
    return 4, struct.pack("<I", v)


def garray(elem, values):
    """An array of u32 (4), i32 (5), f32 (6) or string (8) values."""
    if elem == 8:
        body = b"".join(gstr(v)[1] for v in values)
    else:
        body = b"".join(struct.pack({4: "<I", 5: "<i", 6: "<f"}[elem], v) for v in values)
    return 9, struct.pack("<IQ", elem, len(values)) + body


def llama_gguf(vocab_kv, n_vocab, ttype=0):
    """A 1-layer llama model (hidden 32, 2 heads, MLP 32) over `vocab_kv`,
    matrices of ggml type `ttype` (F32 or Q8_0)."""
    kv = {"general.architecture": gstr("llama"), "llama.block_count": gu32(1),
          "llama.embedding_length": gu32(32), "llama.feed_forward_length": gu32(32),
          "llama.attention.head_count": gu32(2), "llama.context_length": gu32(64)}
    kv.update(vocab_kv)

    def matrix(rows, cols):
        if ttype == 8:  # Q8_0: per 32 values an f16 scale (1/64) and 32 int8
            block = struct.pack("<H", 0x2400) + bytes((i * 7) % 256 for i in range(32))
            return 8, [cols, rows], block * (rows * cols // 32)
        return 0, [cols, rows], struct.pack(f"<{rows * cols}f", *[(i % 7 - 3) / 10 for i in range(rows * cols)])
    ones = (0, [32], struct.pack("<32f", *[1.0] * 32))
    t = {"token_embd.weight": matrix(n_vocab, 32), "output_norm.weight": ones,
         "blk.0.attn_norm.weight": ones, "blk.0.ffn_norm.weight": ones}
    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        t[f"blk.0.{name}.weight"] = matrix(32, 32)
    return gguf(kv, t)


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
              "llama_tied_sharded", "qwen2_tiny"):
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

    g = corpus("gguf")
    write(g, "every_type", gguf(
        {"u8": (0, b"\x07"), "i16": (3, struct.pack("<h", -3)), "f32": (6, struct.pack("<f", 0.5)),
         "bool": (7, b"\x01"), "s": gstr("text"), "u64": (10, struct.pack("<Q", 9)),
         "f64": (12, struct.pack("<d", 1.5)), "strings": garray(8, ["a", "bc"]),
         "nested": (9, struct.pack("<IQ", 9, 1) + garray(4, [1, 2])[1]),
         "general.alignment": gu32(32)},
        {"f32": (0, [4, 2], struct.pack("<8f", *range(8))),
         "f16": (1, [4], struct.pack("<4H", 0x3C00, 0xC000, 0x7BFF, 1)),
         "bf16": (30, [2], struct.pack("<2H", 0x3F80, 0x8001))}))
    write(g, "quantized_rows", gguf({}, {
        "q8_0": (8, [32, 2], (struct.pack("<H", 0x3C00) + bytes(range(32))) * 2),
        "q4_0": (2, [32], struct.pack("<H", 0x3800) + bytes(range(16))),
        "q4_k": (12, [256], struct.pack("<HH", 0x3000, 0x2000) + bytes(range(12)) + bytes(range(128))),
        "q6_k": (14, [256], bytes(range(128)) + bytes(range(64)) + bytes(range(16)) + struct.pack("<H", 0x2800)),
        "iq2_xxs": (16, [256], bytes(66))}))
    bpe = {"tokenizer.ggml.model": gstr("gpt2"), "tokenizer.ggml.pre": gstr("smollm"),
           "tokenizer.ggml.tokens": garray(8, ["<|im_start|>", "H", "e", "l", "o", "He", "ll", "\u0120"]),
           "tokenizer.ggml.token_type": garray(5, [3, 1, 1, 1, 1, 1, 1, 1]),
           "tokenizer.ggml.merges": garray(8, ["H e", "l l"]),
           "tokenizer.ggml.eos_token_id": gu32(0)}
    write(g, "llama_bpe_f32", llama_gguf(bpe, 8))
    spm = {"tokenizer.ggml.model": gstr("llama"),
           "tokenizer.ggml.tokens": garray(8, ["<unk>", "<s>", "</s>", "\u2581", "a", "\u2581a", "<0x41>"]),
           "tokenizer.ggml.scores": garray(6, [0, 0, 0, -1, -2, -0.5, 0]),
           "tokenizer.ggml.token_type": garray(5, [2, 3, 3, 1, 1, 1, 6]),
           "tokenizer.ggml.bos_token_id": gu32(1), "tokenizer.ggml.eos_token_id": gu32(2)}
    write(g, "llama_spm_q8_0", llama_gguf(spm, 7, ttype=8))

    # Every template of the chat template golden cases, as it is.
    ct = corpus("chat_template")
    with open(os.path.join(ROOT, "tests/golden/chat_templates/templates.json")) as f:
        for name, source in json.load(f).items():
            write(ct, name.replace(".", "_"), source.encode())
    write(ct, "content_with_tags", b"#{{ evil }} {% for %} \xc3\xa9\n{% for m in messages %}{{ m.content | upper }}{% endfor %}")

    r = corpus("request")
    requests = {
        "text": 'text: "Hello" stopping { max_new_tokens: 8 }',
        "ids": "token_ids { ids: [1, 2, 3] } sampling { temperature: 0 } stopping { ignore_eos: true }",
        "sampling": 'text: "x" sampling { temperature: 0.7 top_k: 40 top_p: 0.9 seed: 5 '
                    'repetition_penalty: 1.1 } stopping { max_new_tokens: 4 stop_token_ids: [50256] '
                    'stop_strings: ["\\n"] } request_id: "r1" return_logprobs: true',
        "limits": "token_ids { ids: [50256, 0] } sampling { top_k: -1 top_p: 0 } "
                  "stopping { max_new_tokens: -5 }",
        "messages": 'messages { messages { role: "system" content: " Be kind. " } '
                    'messages { role: "user" content: "Hi<|endoftext|>there" } '
                    'messages { role: "tool" content: "x" } } return_logprobs: true top_logprobs: 3',
    }
    proto = os.path.join(ROOT, "proto/flover.proto")
    for name, text in requests.items():
        out = subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--encode=flover.v1.GenerateRequest",
                              proto], input=text.encode(), capture_output=True, check=True).stdout
        write(r, name, out)


if __name__ == "__main__":
    main()
