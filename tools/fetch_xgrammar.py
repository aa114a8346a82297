#!/usr/bin/env python3
"""Puts xgrammar 0.2.8's C++ core (Apache-2.0; the structured-output engine
vLLM, SGLang, TensorRT-LLM and MLC use) in third_party/xgrammar/src
(git-ignored), where //third_party/xgrammar builds it without its Python
bindings: cpp/ (less tvm_ffi/), include/, 3rdparty/picojson,
3rdparty/dlpack, LICENSE and NOTICE. Its code is never copied into the
repository.

The source distribution comes from PyPI (the URL its simple index lists
for the pinned version) and is checked against its SHA-256; pip's own
`pip download --no-binary :all: xgrammar==0.2.8` fetches the same file but
first builds its metadata, which needs scikit-build-core, nanobind and
setuptools_scm. Run by tools/setup.sh; does nothing when the tree is in
place.

    tools/fetch_xgrammar.py [DEST_DIR]
"""
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request

VERSION = "0.2.8"
URL = ("https://files.pythonhosted.org/packages/03/0f/"
       "29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-0.2.8.tar.gz")
SHA256 = "8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80"
KEEP = ("cpp/", "include/", "3rdparty/picojson/", "3rdparty/dlpack/include/", "LICENSE", "NOTICE")
SKIP = ("cpp/tvm_ffi/",)
STAMP = "FETCHED"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "third_party", "xgrammar", "src")
    stamp = os.path.join(dest, STAMP)
    if os.path.exists(stamp) and open(stamp).read().strip() == SHA256:
        return 0
    with urllib.request.urlopen(URL, timeout=120) as response:
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        sys.exit(f"fetch_xgrammar: {URL} has SHA-256 {digest}, expected {SHA256}")
    prefix = f"xgrammar-{VERSION}/"
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(dest) or ".")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                if not member.name.startswith(prefix) or not member.isfile():
                    continue
                rel = member.name[len(prefix):]
                if not rel.startswith(KEEP) or rel.startswith(SKIP) or ".." in rel.split("/"):
                    continue
                out = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with tar.extractfile(member) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        with open(os.path.join(tmp, STAMP), "w") as f:
            f.write(SHA256 + "\n")
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
