#!/usr/bin/env python3
"""Fails when a doc or a source comment names a file of this project that
does not exist (issue 41: comments and docs drift as files move).

Checked: every path with a folder (`engine/engine.cc`, `docs/api.md`) and
every bare source file name (`jinja_text.cc`, `flover.proto`) in README.md,
docs/*.md and the comments of C++, Python, shell and Bazel files. A path is
found relative to the repository root, to the file that names it, or as the
end of a path in the tree (`cpu/cpu_backend.cc` under a kernels/ heading); a
bare name anywhere in the tree; `<family>_config.cc` is a pattern, not a name. Names of other projects' files are allowed by the
list below (a path under one of their folders, or a header they ship).

    python3 tools/check_refs.py        (exit 1 and a list when something is missing)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTS = r"(?:cc|h|inc|py|sh|md|bzl|proto|jinja|bazel)"
PATH = re.compile(r"(?<![\w./<>-])((?:[A-Za-z_][\w.-]*/)+[\w.-]*\." + EXTS + r")(?![\w/])")
BARE = re.compile(r"(?<![\w./<>-])([A-Za-z_][\w-]*\.(?:cc|h|inc|proto))(?![\w/.])")
# Other projects' files that our comments and docs name on purpose.
FOREIGN_DIRS = ("third_party/xgrammar/src/", "cpp/", "include/xgrammar/", "3rdparty/", "ggml/", "src/models/",
                "tools/server/", "common/", "vllm/", "xgrammar/", "/usr/", "usr/", "grammars/", "examples/",
                "maskbench/", "sglang/", "csrc/", "transformers/", "llama.cpp/", "src/llama", "torch/")
FOREIGN_NAMES = {"httplib.h", "immintrin.h", "picojson.h", "dlpack.h", "nccl.h", "cublasLt.h", "cublas_v2.h",
                 "cuda_runtime.h", "cuda.h", "mpi.h", "omp.h", "dnnl.h", "dnnl.hpp", "gtest.h", "gmock.h",
                 "grpcpp.h", "json.h", "llama.h", "ggml.h", "ggml-cpu.h", "unistd.h", "dlfcn.h", "spawn.h",
                 "cuda_bf16.h", "cuda_fp16.h", "mma.h", "nvrtc.h", "cub.h", "cutlass.h", "ggml-quants.h",
                 "sampling.h", "grammar.h", "matcher.h", "compiler.h", "structural_tag.h", "log.h",
                 "llama-grammar.h", "llama-sampling.h", "pybind11.h", "nanobind.h", "main.cc", "server.h",
                 "map_field.h", "options.h"}


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if os.path.exists(os.path.join(ROOT, p))]


def comment_text(path, text):
    """The comments of a source file (docs: all of it)."""
    if path.endswith(".md"):
        return text
    if path.endswith((".cc", ".h", ".inc", ".proto", ".cu", ".cuh")):
        return "\n".join(re.findall(r"//[^\n]*|/\*.*?\*/", text, re.S))
    return "\n".join(re.findall(r"#[^\n]*", text))  # py, sh, bzl, BUILD


def main():
    files = tracked()
    paths = set(files)
    names = {os.path.basename(p) for p in files}
    missing = []
    for f in files:
        if not (f.endswith((".md", ".cc", ".h", ".inc", ".proto", ".py", ".sh", ".bzl", ".cu", ".cuh"))
                or os.path.basename(f) == "BUILD.bazel"):
            continue
        if f.startswith(("third_party/", "tests/golden/")) and not f.endswith(("BUILD.bazel", ".py")):
            continue
        try:
            text = comment_text(f, open(os.path.join(ROOT, f), encoding="utf-8").read())
        except UnicodeDecodeError:
            continue
        here = os.path.dirname(f)
        for m in PATH.finditer(text):
            ref = m.group(1).rstrip(".")
            if ref.startswith(FOREIGN_DIRS) or "*" in ref or "..." in ref:
                continue
            if ref in paths or os.path.normpath(os.path.join(here, ref)) in paths:
                continue
            if os.path.exists(os.path.join(ROOT, ref)):
                continue
            if any(p.endswith("/" + ref) for p in paths):  # named from inside its folder
                continue
            missing.append((f, ref))
        for m in BARE.finditer(text):
            ref = m.group(1)
            if ref in names or ref in FOREIGN_NAMES:
                continue
            missing.append((f, ref))
    for f, ref in sorted(set(missing)):
        print(f"{f}: names {ref}, which is not in the tree")
    if missing:
        print(f"check_refs: {len(set(missing))} names of files that do not exist", file=sys.stderr)
        return 1
    print(f"check_refs: every file named in {len(files)} files' docs and comments exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
