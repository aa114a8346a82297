#!/usr/bin/env python3
"""Fails when README.md or docs/*.md name a command-line flag of ours that
nothing defines (issue 41: docs drift as flags are renamed or removed).

What is read: code spans (`...`, across line breaks too) and fenced code
blocks; flags in plain prose are not checked. A code span is one command; in
a code block a command is a line, with its backslash continuations joined.

A flag is `--name` or `--name=value` (a letter, then letters, digits, `_`
and `-`), not preceded by a word character, `-` or `=` (so `a--b` and
`---` are not flags, nor the value of `--server_args=--dtype=f32`, which
is another program's) and followed by the end, a space, `=` or punctuation (so the
arrow `--gRPC-->` is not one). Each flag belongs to the last program named
before it in its command:
  - one of our C++ binaries (every `cc_binary` in a BUILD.bazel, named by
    itself or by a path ending in it, `.bazel-root/bin/server/flover_server`):
    an `ABSL_FLAG(type, name, ...)` in the sources of that binary or of the
    libraries it depends on in this tree (BUILD.bazel `srcs` and `deps`,
    followed through `//pkg:target` and `:target` labels) must define it,
    or it is one of Abseil's own (`--help`, `--flagfile`, ...);
  - a Python script of ours (`benchmarks/x.py`, `tools/x.py`, or the bare
    `x.py` when one of those folders has it): its argparse
    `add_argument("--name"` must define it (or it is `--help`);
  - a shell script of ours (`tools/x.sh`, `benchmarks/x.sh`): the script
    must test for it (`"--name"`, or a `case` pattern `--name)` /
    `--name=*)`), or hand `"$@"` to one of our binaries that defines it;
  - a program of another project (FOREIGN_PROGRAMS: mpirun, bazel,
    llama.cpp's, protoc, pip...): not checked;
  - no program in the command: the flag must be defined by one of the
    above of ours (any ABSL_FLAG in the tree, any benchmarks/ or tools/
    script's argparse or shell flags), be a known flag of another project
    (FOREIGN_FLAGS), for the prose that names `--mca` or `--jinja`, or a
    flag of ours that history sections name after it went (REMOVED_FLAGS).

Files are the tree as git sees it (tracked, and new files not ignored),
third_party/ left out. Runs in well under a second.

    python3 tools/check_flags.py       (exit 1 and a list when a flag is undefined)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAG = re.compile(r"(?<![\w=-])--([A-Za-z][\w-]*)(?=$|[\s=,;:.)\]}|/'\"`])")
ABSL_FLAG = re.compile(r"ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,")
ARGPARSE = re.compile(r"add_argument\(\s*((?:['\"]-[\w-]+['\"]\s*,\s*)*['\"]-[\w-]+['\"])")
SHELL_FLAG = re.compile(r"[\"'](--[A-Za-z][\w-]*)[=\"']|^\s*(--[A-Za-z][\w-]*)(?:=\*)?[|)]", re.M)
# Abseil's built-in flags (Abseil's flags parser and usage_config).
ABSL_BUILTIN = {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch", "version",
                "only_check_args", "flagfile", "fromenv", "tryfromenv", "undefok"}
# Programs of other projects: the flags after them are theirs.
FOREIGN_PROGRAMS = {"mpirun", "mpiexec", "bazel", "bazelw", "pip", "pip3", "python", "python3", "protoc",
                    "nvcc", "llama-server", "llama-cli", "llama-bench", "llama-quantize", "git", "curl",
                    "docker", "ssh", "tc", "apt-get", "nvidia-smi", "nsys", "ncu", "perf", "valgrind",
                    "gdb", "clang", "gcc", "g++", "cmake", "convert_hf_to_gguf.py", "pytest", "grpcurl"}
# Flags of other projects that our docs name in prose code spans, where no
# program precedes them.
FOREIGN_FLAGS = {
    "host", "hostfile", "mca", "map-by", "bind-to", "allow-run-as-root", "oversubscribe",  # mpirun
    "config", "define", "symlink_prefix", "nocache_test_results", "test_output",  # bazel
    "gtest_filter",  # googletest
    "python_out", "grpc_out", "plugin",  # protoc and its gRPC plugin
    "jinja", "spec-ngram-simple-size-n", "spec-ngram-simple-size-m",  # llama-server
}
# Flags of ours that are gone, named by history sections (say when they went).
REMOVED_FLAGS = {"kv_shuffle"}  # the KV cache's compaction, replaced by the block table on 2026-11-24


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def files():
    """The tree's files as git sees them (tracked, and new ones not ignored)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines()
            if not p.startswith("third_party/") and os.path.exists(os.path.join(ROOT, p))]


def build_graph(tree):
    """{"//pkg:name": (kind, srcs as repository paths, deps as labels)} for every cc rule."""
    rules = {}
    for build in tree:
        if os.path.basename(build) != "BUILD.bazel":
            continue
        pkg = os.path.dirname(build)
        for kind, body in re.findall(r"^(cc_binary|cc_library|cc_test)\((.*?)^\)", read(build), re.M | re.S):
            name = re.search(r'\bname\s*=\s*"([^"]+)"', body)
            if not name:
                continue

            def strings(attr):
                m = re.search(r"\b" + attr + r"\s*=\s*\[(.*?)\]", body, re.S)
                return re.findall(r'"([^"]+)"', m.group(1)) if m else []

            srcs = [os.path.join(pkg, s) for s in strings("srcs") if s.endswith((".cc", ".h"))]
            deps = []
            for d in strings("deps"):
                if d.startswith(":"):
                    deps.append(f"//{pkg}{d}")
                elif d.startswith("//") and not d.startswith("//third_party"):
                    deps.append(d if ":" in d else f"{d}:{d.rsplit('/', 1)[-1]}")
            rules[f"//{pkg}:{name.group(1)}"] = (kind, srcs, deps)
    return rules


def binary_flags(rules, absl_of):
    """{binary name: the ABSL flags its sources and in-tree deps define}."""
    out = {}
    for label, (kind, _, _) in rules.items():
        if kind != "cc_binary":
            continue
        seen, todo, flags = set(), [label], set()
        while todo:
            lab = todo.pop()
            if lab in seen or lab not in rules:
                continue
            seen.add(lab)
            _, srcs, deps = rules[lab]
            for s in srcs:
                flags |= absl_of.get(s, set())
            todo.extend(deps)
        out[label.rsplit(":", 1)[1]] = flags
    return out


def scripts(tree, binaries):
    """{script path: the flags it defines} for benchmarks/ and tools/ scripts. A
    shell script that hands "$@" to one of our binaries takes that binary's flags."""
    out = {}
    for path in tree:
        if os.path.dirname(path) not in ("benchmarks", "tools") or not path.endswith((".py", ".sh")):
            continue
        text = read(path)
        if path.endswith(".py"):
            names = {"help"}
            for m in ARGPARSE.finditer(text):
                names |= {n.lstrip("-") for n in re.findall(r"['\"](-[\w-]+)['\"]", m.group(1))}
        else:
            names = {(a or b)[2:] for a, b in SHELL_FLAG.findall(text)}
            for line in text.splitlines():
                if '"$@"' in line:
                    for word in line.split():
                        names |= binaries.get(word.rsplit("/", 1)[-1], set())
        out[path] = names
    return out


def commands(text):
    """(line number, command) for each code span and code-block line of a markdown file."""
    out, prose, in_block, joined, start = [], [], False, "", 0
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith(("```", "~~~")):
            in_block = not in_block
            prose.append((n, ""))
            continue
        if in_block:
            if not joined:
                start = n
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            out.append((start, joined + line))
            joined = ""
        else:
            prose.append((n, line))
    # Code spans, which may run over a line break (not over a blank line).
    body = "\n".join(line for _, line in prose)
    numbers = [n for n, _ in prose]
    for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", body, re.S):
        if "\n\n" in m.group(2):
            continue
        out.append((numbers[body.count("\n", 0, m.start())], m.group(2).replace("\n", " ")))
    return out


def main():
    tree = files()
    absl_of = {}
    for path in tree:
        if path.endswith(".cc"):
            names = set(ABSL_FLAG.findall(read(path)))
            if names:
                absl_of[path] = names
    all_absl = set().union(*absl_of.values())
    binaries = binary_flags(build_graph(tree), absl_of)
    script_flags = scripts(tree, binaries)
    by_base = {}
    for path in script_flags:
        by_base.setdefault(os.path.basename(path), path)
    ours = all_absl | ABSL_BUILTIN | set().union(*script_flags.values())

    docs = ["README.md"] + sorted(p for p in tree if re.fullmatch(r"docs/[^/]+\.md", p))
    bad, checked = [], 0
    for doc in docs:
        for line, command in commands(read(doc)):
            program = None  # (kind, name, flags)
            for token in command.split():
                if not token.lstrip("(\"'").startswith("--"):
                    word = token.strip("`'\"()[],;:")
                    base = word.rsplit("/", 1)[-1]
                    if base in binaries:
                        program = ("binary", base, binaries[base] | ABSL_BUILTIN)
                    elif word in script_flags or (base in by_base and (word == base or word.endswith("/" + base))):
                        path = word if word in script_flags else by_base[base]
                        program = ("script", path, script_flags[path])
                    elif base in FOREIGN_PROGRAMS:
                        program = ("foreign", base, None)
                for name in FLAG.findall(token):
                    checked += 1
                    if program is None:
                        if name not in ours and name not in FOREIGN_FLAGS and name not in REMOVED_FLAGS:
                            bad.append((doc, line, f"--{name} is defined by no binary or script of ours"))
                    elif program[0] != "foreign" and name not in program[2]:
                        bad.append((doc, line, f"--{name} is not a flag of {program[1]}"))
    for doc, line, what in sorted(set(bad)):
        print(f"{doc}:{line}: {what}")
    sys.stdout.flush()
    if bad:
        print(f"check_flags: {len(set(bad))} flags that nothing defines", file=sys.stderr)
        return 1
    print(f"check_flags: {checked} flags in {len(docs)} docs, each defined by the program that takes it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
