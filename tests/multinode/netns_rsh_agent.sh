#!/usr/bin/env bash
# An rsh agent for mpirun (-mca plm_rsh_agent) whose "hosts" are network
# namespaces on this machine: `agent HOST COMMAND...` runs COMMAND (Open
# MPI's orted line, written for a remote shell) inside namespace HOST, in a
# UTS namespace of its own whose host name is HOST, so each "host" has its
# own name and network stack as a real node would. HOST must be a namespace
# `ip netns` lists.
set -euo pipefail
host="$1"
shift
ip netns list | grep -qE "^${host}( |$)" || { echo "netns_rsh_agent: no network namespace '$host'" >&2; exit 1; }
exec ip netns exec "$host" unshare --uts sh -c "hostname '$host' && exec $*"
