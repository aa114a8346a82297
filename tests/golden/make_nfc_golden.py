#!/usr/bin/env python3
"""Writes the fixtures of Unicode normalization form C (Qwen 2 and 3's
tokenizer.json normalizer):

  hf_tokenizers/qwen_nfc/   the qwen fixture's tokenizer.json with
                            "normalizer": {"type": "NFC"}, and cases.json
                            (make_tokenizer_golden.py's format: encode,
                            decode and continuation cases) from the
                            `tokenizers` library, over texts whose NFC
                            differs from them (combining marks in and out of
                            canonical order, decomposed Latin, Vietnamese
                            and Greek, Hangul jamo, singletons such as the
                            Angstrom and Ohm signs, composition exclusions)
                            beside make_tokenizer_golden.py's own texts;
  nfc/cases.json            pairs of text and its NFC from Python's
                            unicodedata (CPython's C implementation): every
                            code point with a canonical decomposition, as
                            itself and decomposed, and random sequences of
                            starters and combining marks.

Run in the oracle venv (tokenizers, transformers, sentencepiece; their
versions and Python's Unicode version are written into the files):
    python3 tests/golden/make_nfc_golden.py
"""
import json
import os
import random
import unicodedata

import tokenizers

import make_tokenizer_golden as golden

HERE = os.path.dirname(os.path.abspath(__file__))

TEXTS = [
    "cafe\u0301 and caf\u00e9",
    "A\u030a and \u212b (the Angstrom sign) and \u00c5",
    "\u2126 ohm, \u03a9 omega",
    "Vie\u0302\u0323t Nam, Vi\u1ec7t Nam",
    "e\u0323\u0302 out of order: e\u0302\u0323",
    "\u1100\u1161\u11a8 jamo and \uac01 syllable",
    "\u1100\u1161 then \u11a8 alone",
    "\u03b1\u0313\u0301 \u1f04",
    "q\u0307\u0323 x\u0323\u0307",
    "\u0958 (a composition exclusion) \u0915\u093c",
    "\u00e9\u0301 two accents",
    "\u0041\u0300\u0301\u0302\u0303 stacked",
    "ﬁ ligature (compatibility only: kept)",
    "\u2000 spaces \u3000",
    "Z\u0335\u0327 strike and cedilla",
    "\u0344 dialytika tonos",
    "\u0f73 tibetan",
    "\ud55c\uad6d\uc5b4 \u1112\u1161\u11ab",
    "n\u0303o\u0308 \u00f1\u00f6",
    "\u1e9b\u0323 long s",
]


def random_combining(rng, n):
    starters = "aeiouAEIOUnczsgk\u03b1\u03c9\u1100\u1161\u0915"
    marks = [0x0300, 0x0301, 0x0302, 0x0303, 0x0308, 0x030A, 0x0323, 0x0327, 0x0328, 0x031B, 0x0345,
             0x0313, 0x0314, 0x0342, 0x093C, 0x05B0, 0x0591, 0x11A8]
    out = []
    for _ in range(n):
        s = "".join(rng.choice(starters) + "".join(chr(rng.choice(marks)) for _ in range(rng.randrange(4)))
                    for _ in range(rng.randrange(1, 6)))
        out.append(s)
    return out


def main():
    src = os.path.join(golden.OUT, "qwen", "tokenizer.json")
    doc = json.load(open(src, encoding="utf-8"))
    doc["normalizer"] = {"type": "NFC"}
    out = os.path.join(golden.OUT, "qwen_nfc")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    rng = random.Random(7)
    golden.write_cases(out, path, TEXTS + random_combining(rng, 20), seed=7)
    decomposable = [cp for cp in range(0x110000)
                    if unicodedata.decomposition(chr(cp)) and not unicodedata.decomposition(chr(cp)).startswith("<")]
    cases = [{"text": text, "nfc": unicodedata.normalize("NFC", text)}
             for cp in decomposable for text in (chr(cp), unicodedata.normalize("NFD", chr(cp)))]
    cases += [{"text": t, "nfc": unicodedata.normalize("NFC", t)} for t in TEXTS + random_combining(rng, 400)]
    os.makedirs(os.path.join(HERE, "nfc"), exist_ok=True)
    with open(os.path.join(HERE, "nfc", "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"unicode": unicodedata.unidata_version, "tokenizers": tokenizers.__version__,
                   "cases": cases}, f, ensure_ascii=False, indent=0)
    print(len(cases), "NFC cases; qwen_nfc written")


if __name__ == "__main__":
    main()
