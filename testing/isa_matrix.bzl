"""Runs a test once per FLOVER_CPU_ISA cap (kernels/cpu/cpu_isa.h), so CI on
any machine also checks every kernel path below its own. A cap the machine
lacks prints a GoogleTest-style skip line and passes."""

CPU_ISA_CAPS = ["avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16"]

def isa_matrix_test(name, test, size = "medium", caps = CPU_ISA_CAPS):
    """One sh_test per cap, `name`_`cap`, running `test` under it."""
    for cap in caps:
        native.sh_test(
            name = name + "_" + cap,
            size = size,
            srcs = ["//testing:isa_test.sh"],
            args = [
                cap,
                "$(location //kernels/cpu:cpu_isa_tool)",
                "$(location " + test + ")",
            ],
            data = [
                test,
                "//kernels/cpu:cpu_isa_tool",
            ],
        )
