#!/usr/bin/env python3
"""Streams one request from a running flover_server and prints it.

    PYTHONPATH=clients/python python3 clients/python/example.py 127.0.0.1:50051
"""
import sys

from flover_client import FloverClient, flover_pb2

client = FloverClient(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")
info = client.model_info()
print(f"{info.model}: {info.n_layer} layers, vocab {info.vocab_size}, tokenizer {info.has_tokenizer}")
for msg in client.generate(token_ids=[464, 2068, 7586], max_new_tokens=8, temperature=0.8, seed=1):
    print(list(msg.token_ids), repr(msg.text))
    if msg.finish_reason:
        print("finished:", flover_pb2.FinishReason.Name(msg.finish_reason), msg.usage)
