#!/usr/bin/env bash
# Runs the TLS test with Debian's python3 (grpcio) and openssl.
exec /usr/bin/python3 tests/python/tls_test.py "$@"
