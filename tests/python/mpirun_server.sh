#!/usr/bin/env bash
# flover_server as two tensor-parallel ranks under mpirun: FLOVER_SERVER
# names the binary; the arguments are its flags.
exec /usr/bin/mpirun --allow-run-as-root --oversubscribe -np 2 "$FLOVER_SERVER" --tp=2 --threads=1 "$@"
