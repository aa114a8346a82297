"""nvcc from a genrule (Bazel 4.2 has no CUDA rules, and we fetch none).

cuda_object compiles one .cu file into a position-independent object for
sm_80 and sm_90 (machine code) plus compute_90 PTX (for newer GPUs), which a
cc_binary(linkshared = True) links like any other object. if_cuda picks
between lists by whether the toolkit was found (cuda_configure.bzl).
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "CUDA_PATH", "NVCC")

CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def if_cuda(if_true, if_false = []):
    return if_true if CUDA_AVAILABLE else if_false

def cuda_object(name, src, hdrs = []):
    """`name`.pic.o from `src`; `hdrs` are the headers it includes."""
    if not CUDA_AVAILABLE:
        return
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [name + ".pic.o"],
        cmd = " ".join([
            NVCC,
            "-c",
            "-std=c++17",
            "-O3",
            "-Xcompiler=-fPIC",
            "-Xcompiler=-Wall",
            "--expt-relaxed-constexpr",
            "-I.",
            "-I$(GENDIR)",
            "-I" + CUDA_PATH + "/include",
        ] + CUDA_ARCH_FLAGS + [
            "-o $@",
            "$(location " + src + ")",
        ]),
        message = "nvcc " + src,
    )

def cuda_module(name, srcs, objects, deps):
    """A shared library (cc_binary, linkshared) of host `srcs` and nvcc
    `objects`, only when the toolkit was found. Everything it calls must
    resolve at link time (-z defs), so a missing symbol fails the build
    here rather than the dlopen on a GPU host."""
    if not CUDA_AVAILABLE:
        return
    native.cc_binary(
        name = name,
        srcs = srcs + objects,
        linkshared = True,
        # Its CUDA libraries are looked up beside it first (a bundle), then
        # in the toolkit, then on the host's library path.
        linkopts = ["-Wl,-z,defs", "-Wl,-rpath,$$ORIGIN:" + CUDA_PATH + "/lib64"],
        deps = deps + ["@local_cuda//:headers"],
    )
