"""Writes groups.json: groups of 32 float32 values and their q8_0 / q4_0
blocks as gguf-py quantizes them (ggml's reference quantizers, bit for bit).
kernels/ggml_quant_test checks Flover's quantizers against it.

Run: PYTHONPATH=<llama.cpp>/gguf-py python make_fixture.py
"""
import json
import os

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

rng = np.random.default_rng(54)
groups = []
for scale in (1e-3, 0.1, 1.0, 3.0, 100.0, 3e4):
    for _ in range(6):
        groups.append(rng.standard_normal(32) * scale)
groups.append(np.zeros(32))                      # scale 0: every code 0 (q4_0: 8)
groups.append(np.full(32, -2.5))                 # all equal, negative
one = np.zeros(32)
one[7] = 1.0
groups.append(one)                               # one value: the rest 0 (q4_0 near ties)
ties = np.arange(32, dtype=np.float64) - 15.5    # d = 1: x / d at .5 steps, q8_0's roundf
ties[0] = 127.0                                  # rounds half away from zero
groups.append(ties)
twins = rng.standard_normal(32)
twins[3], twins[20] = 4.0, -4.0                  # equal magnitudes: q4_0 takes the first
groups.append(twins)
groups.append(rng.standard_normal(32) * 1e-6)    # the scale a half subnormal
x = np.stack(groups).astype(np.float32)


def hexbits(a):
    return [format(int(v), "08x") for v in a.view(np.uint32)]


out = {"groups": []}
for row in x:
    q8 = quants.quantize(row.reshape(1, 32), T.Q8_0).tobytes().hex()
    q4 = quants.quantize(row.reshape(1, 32), T.Q4_0).tobytes().hex()
    out["groups"].append({"x": hexbits(row), "q8_0": q8, "q4_0": q4})
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "groups.json")
with open(path, "w") as f:
    json.dump(out, f, indent=0)
print(f"{len(out['groups'])} groups -> {path}")
