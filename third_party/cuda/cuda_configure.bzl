"""Finds the CUDA toolkit at $CUDA_PATH (default /usr/local/cuda).

Creates @local_cuda with:
  defs.bzl   CUDA_AVAILABLE (bool), CUDA_PATH, NVCC
  BUILD      :headers, :cudart, :cublaslt (only when the toolkit is there)
A machine without the toolkit still builds and tests everything but the
CUDA backend module, which is then left out (see cuda.bzl's if_cuda).
"""

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    found = (ctx.path(path + "/bin/nvcc").exists and
             ctx.path(path + "/include/cublasLt.h").exists and
             ctx.path(path + "/lib64/libcudart.so").exists)
    if not found:
        ctx.file("defs.bzl", "CUDA_AVAILABLE = False\nCUDA_PATH = \"\"\nNVCC = \"\"\n")
        ctx.file("BUILD.bazel", "# No CUDA toolkit at %s.\n" % path)
        return
    ctx.symlink(path + "/include", "include")
    ctx.file("defs.bzl", "CUDA_AVAILABLE = True\nCUDA_PATH = \"%s\"\nNVCC = \"%s/bin/nvcc\"\n" % (path, path))
    lib = path + "/lib64"
    ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.inl"], allow_empty = True),
    includes = ["include"],
)

# Linked by the CUDA backend module only; found at run time on the host's
# library path (the module carries no rpath into the build machine's tree).
cc_library(
    name = "cudart",
    linkopts = ["-L{lib}", "-lcudart"],
    deps = [":headers"],
)

cc_library(
    name = "cublaslt",
    linkopts = ["-L{lib}", "-lcublasLt"],
    deps = [":cudart"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{lib}", "-lnccl"],
    deps = [":cudart"],
)
""".replace("{lib}", lib))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
