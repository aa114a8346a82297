#!/usr/bin/env bash
# Runs tests under a sanitizer, built in its own output directory:
#
#   tools/sanitize.sh asan [TARGETS...]   AddressSanitizer + UndefinedBehaviorSanitizer
#   tools/sanitize.sh tsan [TARGETS...]   ThreadSanitizer
#
# TARGETS default to //... (every test: C++ units, the servers the Python and
# shell tests start, the MPI ranks). A finding aborts the process it is in,
# so the test that started it fails with the report in its log. Suppressions
# (tools/sanitizers/*.supp) name third-party code only, each with a reason.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kind="${1:?usage: tools/sanitize.sh asan|tsan [TARGETS...]}"
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(//...)
# ASan: allocator_may_return_null so that an impossible allocation is the
# error our code reports (as with the real allocator) rather than an abort;
# fast_unwind_on_malloc=0 so that leak reports from libraries built without
# frame pointers (OpenMPI, gRPC) carry whole stacks the suppressions can match.
case "$kind" in
  asan) opts=(--test_env="ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:fast_unwind_on_malloc=0:strict_string_checks=1:check_initialization_order=1"
             --test_env="UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
             --test_env="LSAN_OPTIONS=suppressions=$root/tools/sanitizers/lsan.supp:print_suppressions=0") ;;
  # TSan: OMP_THREAD_LIMIT=1 runs every OpenMP region (ours and oneDNN's)
  # on the thread that enters it. Debian's libgomp is not instrumented, so
  # TSan cannot see a region's fork and join and reports every region as
  # a race; with one thread per region there is nothing to misreport, and
  # the engine's, gRPC's and the servers' own threads are all still checked.
  # With tools/tsan_grpc.sh's instrumented gRPC and Abseil built, our
  # binaries load them instead of Debian's (same sonames, found first by an
  # RPATH, which also serves their dependencies' lookups); other programs
  # (Python's grpcio, which links Debian's libgrpc) are left alone.
  tsan) supp="$root/.bazel-root/tsan.supp"
        mkdir -p "$root/.bazel-root"
        cp "$root/tools/sanitizers/tsan.supp" "$supp"
        opts=(--test_env=OMP_THREAD_LIMIT=1)
        if [ -d "$root/.bazel-root/tsan-grpc/lib" ]; then
          opts+=(--linkopt="-Wl,--disable-new-dtags,-rpath,$root/.bazel-root/tsan-grpc/lib")
          echo "tools/sanitize.sh: gRPC and Abseil instrumented too (.bazel-root/tsan-grpc/lib)"
        else
          cat "$root/tools/sanitizers/tsan_debian_grpc.supp" >> "$supp"
          echo "tools/sanitize.sh: Debian's gRPC, not instrumented (tools/tsan_grpc.sh builds one):" \
            "TSan cannot see its hand-offs between threads, so tests that start servers or" \
            "clients report races on memory handed over through it; only tests without gRPC" \
            "are meaningful this way" >&2
        fi
        opts+=(--test_env="TSAN_OPTIONS=suppressions=$supp:halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1") ;;
  *) echo "tools/sanitize.sh: asan or tsan, not '$kind'" >&2; exit 2 ;;
esac
# Its own Bazel server, output base and result links (.bazel-root/asan-bin,
# .bazel-root/asan-testlogs, inside the clone), so a sanitizer
# run neither waits for nor evicts the normal build. Sanitized code runs
# several times slower: every test gets the long timeout.
exec bazel --output_user_root="$root/.bazel-root" --output_base="$root/.bazel-root/$kind-base" \
    test --config="$kind" --symlink_prefix=".bazel-root/$kind-" "${opts[@]}" \
    --test_env=FLOVER_SANITIZER="$kind" --test_timeout=900 \
    --test_output=errors "${targets[@]}"
