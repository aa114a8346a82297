#!/usr/bin/env python3
"""Writes the GGUF fixtures Flover's GGUF tests compare against.

gguf/quants.gguf — every tensor type Flover dequantizes, each as tensor
  "<TYPE>.random" beside "<TYPE>.random.expected" (F32): what gguf-py's
  gguf.quants.dequantize makes of those blocks (the oracle, not a copy).
  Types gguf-py can quantize (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16) are
  quantized from normal data ("<TYPE>.quantized" beside
  "<TYPE>.quantized.expected"); every type also gets random blocks — all bit
  patterns of the packed values, with finite random f16 scales — so every
  bit of the layout is exercised.

Run once after changing it; the outputs are committed, so tests and CI never
need Python packages (a venv with --system-site-packages over Debian's
python3-torch):
    pip install "transformers==4.44.2" "tokenizers>=0.19,<0.20" gguf sentencepiece
    python3 tests/golden/make_gguf_golden.py
"""
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gguf")

# Byte offsets of each block's f16 scale fields, kept finite in random blocks.
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
QUANTIZABLE = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
ROWS, COLS = 3, 512  # two 256-value super-blocks per row


def random_blocks(rng, qtype):
    """ROWS x COLS values' worth of random blocks of `qtype`, as raw bytes."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block
    if qtype == T.F16:
        return rng.standard_normal(ROWS * COLS).astype(np.float16).view(np.uint8).reshape(ROWS, -1)
    if qtype == T.BF16:
        # Every bit pattern, NaNs and infinities included: widening keeps bits.
        return rng.integers(0, 256, size=(ROWS, COLS * 2), dtype=np.uint8)
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        scale = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(ROWS, -1)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261124)
    w = gguf.GGUFWriter(os.path.join(OUT, "quants.gguf"), arch="flover-quants-test")
    types = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
             T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
    for qtype in types:
        name = qtype.name
        if qtype == T.F32:
            data = rng.standard_normal((ROWS, COLS)).astype(np.float32)
            w.add_tensor(f"{name}.random", data)
            w.add_tensor(f"{name}.random.expected", data.copy())
            continue
        raw = random_blocks(rng, qtype)
        w.add_tensor(f"{name}.random", raw, raw_dtype=qtype)
        w.add_tensor(f"{name}.random.expected", gguf.quants.dequantize(raw, qtype).astype(np.float32))
        if qtype in QUANTIZABLE:
            x = (rng.standard_normal((ROWS, COLS)) * 0.1).astype(np.float32)
            q = gguf.quants.quantize(x, qtype)
            if qtype == T.F16:
                q = q.view(np.uint8)
            w.add_tensor(f"{name}.quantized", q, raw_dtype=qtype)
            w.add_tensor(f"{name}.quantized.expected",
                         gguf.quants.dequantize(q, qtype).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
