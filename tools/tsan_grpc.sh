#!/usr/bin/env bash
# Builds Debian's own gRPC and the Abseil beneath it (the sources of the
# libgrpc++ and libabsl_* the project links: same versions, same patches)
# with ThreadSanitizer, into the clone's .bazel-root/tsan-grpc/lib, for
# `tools/sanitize.sh tsan`: with it there, every process the tests start
# loads these libraries (same sonames, through LD_LIBRARY_PATH) instead of
# the uninstrumented ones, so TSan sees gRPC's own hand-offs between
# threads and absl::Mutex (which gRPC locks with). Not part of CI (about 25
# minutes on 2 cores); nothing outside the clone is written but the apt
# source list entry it needs (deb-src for bookworm main), which it adds if
# missing.
#
#   tools/tsan_grpc.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/.bazel-root/tsan-grpc"
mkdir -p "$out/src" "$out/lib"
cd "$out/src"
flags="-fsanitize=thread -O1 -g -fno-omit-frame-pointer"

# unpack SOURCE_PACKAGE BINARY_PACKAGE: Debian's source of the installed
# BINARY_PACKAGE, patched, in ./SOURCE_PACKAGE-UPSTREAM_VERSION; prints that.
unpack() {
  local version upstream
  version="$(dpkg-query -W -f='${Version}' "$2")"  # e.g. 1.51.1-3+b1
  upstream="${version%%-*}"
  if [ ! -d "$1-$upstream" ]; then
    if ! apt-get source --download-only "$1=${version%+b*}" > /dev/null 2>&1; then
      if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
          > /etc/apt/sources.list.d/flover-deb-src.sources
        apt-get update > /dev/null
      fi
      apt-get source --download-only "$1=${version%+b*}" > /dev/null
    fi
    command -v dpkg-source > /dev/null || apt-get install -y dpkg-dev > /dev/null
    dpkg-source -x "$1"_*.dsc "$1-$upstream" > /dev/null  # applies Debian's patches
  fi
  echo "$1-$upstream"
}

# Abseil as Debian builds its shared libraries (C++17; the inline namespace
# "debian3" comes from Debian's patched options.h).
absl_src=$(unpack abseil libabsl-dev)
cmake -S "$absl_src" -B build-absl -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF > "$out/cmake-absl.log"
make -C build-absl -j"$(nproc)" > "$out/make-absl.log" 2>&1 ||
  { tail -30 "$out/make-absl.log" >&2; exit 1; }
find build-absl -name 'libabsl_*.so*' -exec cp -a {} "$out/lib/" \;

grpc_src=$(unpack grpc libgrpc++-dev)
# Debian's build options where they matter for the ABI: shared libraries,
# the system's Abseil, protobuf, c-ares, RE2, OpenSSL and zlib. (No code
# generator is built: protoc's library is named only to satisfy CMake; so
# no libgrpc++_reflection either, and the system's, uninstrumented, loads
# the instrumented libgrpc++ beneath it.)
cmake -S "$grpc_src" -B build -G "Unix Makefiles" \
  -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags -std=c++17" \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DBUILD_SHARED_LIBS=ON \
  -DgRPC_INSTALL=OFF -DgRPC_BUILD_TESTS=OFF -DgRPC_BUILD_CODEGEN=OFF \
  -DgRPC_ABSL_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package -DgRPC_CARES_PROVIDER=package \
  -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
  -DProtobuf_PROTOC_LIBRARY="$(ls /usr/lib/x86_64-linux-gnu/libprotoc.so* | head -1)" \
  > "$out/cmake.log"
make -C build -j"$(nproc)" grpc++ grpc gpr upb address_sorting > "$out/make.log" 2>&1 ||
  { tail -30 "$out/make.log" >&2; exit 1; }
find build -maxdepth 1 -name 'lib*.so*' -exec cp -a {} "$out/lib/" \;
# Same sonames as the system's, or the loader would not swap them in.
for lib in "$out"/lib/lib*.so.*; do
  soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
  [ -e "/usr/lib/x86_64-linux-gnu/$soname" ] || echo "tools/tsan_grpc.sh: $soname is not a system soname" >&2
done
ls "$out/lib"
