#!/usr/bin/env bash
# Runs the metrics test with Debian's python3 (grpcio and protobuf from
# python3-grpcio / python3-protobuf) and Prometheus from Debian's prometheus.
exec /usr/bin/python3 tests/python/metrics_test.py "$@"
