#!/usr/bin/env bash
# Runs the Python client test with Debian's python3 (grpcio and protobuf from
# python3-grpcio / python3-protobuf).
exec /usr/bin/python3 tests/python/python_client_test.py "$@"
