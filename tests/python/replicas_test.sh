#!/usr/bin/env bash
# Runs the replicas test with Debian's python3 (grpcio and protobuf from
# python3-grpcio / python3-protobuf).
exec /usr/bin/python3 tests/python/replicas_test.py "$@"
