"""The end-to-end test (e2e_test.cc) against one server configuration."""

_DEPS = [
    ":server_process",
    "//testing:backends",
    "//proto:flover_cc_proto",
    "//third_party/system:grpc",
    "//engine:generate",
    "//model:model_loader",
    "//testing:golden",
    "//util:json",
    "//kernels/cpu:cpu_backend",
    "//third_party/system:gtest",
]

def e2e_test(name, server_flags = [], tp = 1, data = []):
    """The server alone (tp 1) or as `tp` ranks under mpirun, with `server_flags`."""
    if tp == 1:
        server = ["$(location //server:flover_server)"]
    else:
        server = [
            "/usr/bin/mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            str(tp),
            "$(location //server:flover_server)",
            "--tp=%d" % tp,
            "--threads=1",
        ]
    native.cc_test(
        name = name,
        size = "medium",
        srcs = ["e2e_test.cc"],
        args = ["$(location //clients:flover_loadgen)"] + server + server_flags,
        data = [
            "//clients:flover_loadgen",
            "//server:flover_server",
        ] + data,
        deps = _DEPS,
    )
