#!/usr/bin/env python3
"""POST /v1/embeddings through the real flover_server on loopback, driven by
the official `openai` package, on the tiny Qwen3-Embedding-shaped fixture
(tests/golden/qwen3_embedding_tiny: sentence-transformers' modules.json says
last-token pooling, normalised). Each vector equals sentence-transformers'
float64 embedding of the same input (golden.json, within 2e-6): text through
the model's tokenizer (the query instruction as the client writes it, the EOS
the post-processor appends), token ids as given, base64 the same floats,
`dimensions` Matryoshka-truncated and renormalised; many inputs in one request
come back in order; gRPC's Embed gives the same vectors; what is wrong is
refused by name; the embedding model serves embeddings without --embeddings
and refuses generation; and a generative model's server started without
--embeddings has no such route."""
import base64
import json
import os
import struct
import sys
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_test  # noqa: E402
from openai_test import Server  # noqa: E402

import openai  # noqa: E402

MODEL_DIR = "tests/golden/qwen3_embedding_tiny"


def close(test, got, want, what):
    test.assertEqual(len(got), len(want), what)
    test.assertLess(max(abs(a - b) for a, b in zip(got, want)), 2e-6, what)


class EmbeddingsTest(unittest.TestCase):
    def test_vectors_match_sentence_transformers(self):
        with open(os.path.join(MODEL_DIR, "golden.json")) as f:
            cases = json.load(f)["cases"]
        # An embedding model (its modules.json names a pooling): that is its role, without --embeddings.
        s = Server(f"--model={MODEL_DIR}", "--max_seq_len=512", "--threads=2", "--max_tokens_per_step=64")
        try:
            name = s.openai.models.list().data[0].id
            # Every input at once (fused, the long one in chunks), in order.
            got = s.openai.embeddings.create(model=name, input=[c["model_input"] for c in cases])
            self.assertEqual([d.index for d in got.data], list(range(len(cases))))
            self.assertEqual(got.usage.prompt_tokens, sum(len(c["input_ids"]) for c in cases))
            for c, d in zip(cases, got.data):
                close(self, d.embedding, c["embedding"], c["name"])
            # Token ids, one and several; base64 holds the same floats.
            one = s.openai.embeddings.create(model=name, input=cases[0]["input_ids"])
            close(self, one.data[0].embedding, cases[0]["embedding"], "ids")
            several = s.openai.embeddings.create(model=name, input=[c["input_ids"] for c in cases[:3]])
            for c, d in zip(cases[:3], several.data):
                self.assertEqual(d.embedding, got.data[cases.index(c)].embedding, c["name"])
            status, raw = s.post("/v1/embeddings", {"model": name, "input": cases[1]["model_input"],
                                                    "encoding_format": "base64"})
            self.assertEqual(status, 200, raw)
            b = base64.b64decode(raw["data"][0]["embedding"])
            self.assertEqual(list(struct.unpack(f"<{len(b) // 4}f", b)), got.data[1].embedding)
            # Matryoshka: the first N values, renormalised.
            for c in cases:
                if "embedding_truncated_renormalized" not in c:
                    continue
                d = s.openai.embeddings.create(model=name, input=c["model_input"], dimensions=c["dimensions"])
                close(self, d.data[0].embedding, c["embedding_truncated_renormalized"], c["name"] + " truncated")
            # Refused by name.
            for body, field in (({"input": "x", "dimensions": 100000}, "dimensions"),
                                ({"input": []}, "input"),
                                ({"input": ["a", [1, 2]]}, "input[1]"),
                                ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                                ({"input": "x", "temperature": 1}, "temperature")):
                with self.assertRaises(openai.BadRequestError) as e:
                    s.openai.embeddings.create(model=name, **body) if "temperature" not in body else \
                        s.openai.embeddings.create(model=name, input="x", extra_body={"temperature": 1})
                self.assertIn(field, str(e.exception))
            with self.assertRaises(openai.NotFoundError):
                s.openai.embeddings.create(model="other", input="x")
            # Past the context, and generation from an embedding model: refused by name.
            with self.assertRaises(openai.BadRequestError) as e:
                s.openai.embeddings.create(model=name, input=[[5] * 600])
            self.assertIn("input", str(e.exception))
            self.assertIn("at most 511", str(e.exception))
            with self.assertRaises(openai.BadRequestError) as e:
                s.openai.completions.create(model=name, prompt="Hello", max_tokens=4)
            self.assertIn("embedding model", str(e.exception))
            # gRPC's Embed: the same vectors as the HTTP API's.
            vectors = s.client.embed(texts=[c["model_input"] for c in cases[:4]])
            self.assertEqual(vectors, [d.embedding for d in got.data[:4]])
            self.assertEqual(s.client.embed(token_ids=[cases[0]["input_ids"]])[0], got.data[0].embedding)
            with self.assertRaises(grpc.RpcError) as e:
                s.client.embed(texts=["a"], token_ids=[[1]])
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("token_ids", e.exception.details())
        finally:
            s.close()
        plain = Server(f"--model={openai_test.CHAT_MODEL}", "--max_seq_len=512", "--threads=2")
        try:
            with self.assertRaises(openai.NotFoundError):
                plain.openai.embeddings.create(model="x", input="hello")
            with self.assertRaises(grpc.RpcError) as e:
                plain.client.embed(texts=["hello"])
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        finally:
            plain.close()


    def test_rerank_matches_the_model_cards_scores(self):
        """/v1/rerank and /rerank on a tiny Qwen3-Reranker-style checkpoint
        (tests/golden/qwen3_reranker_tiny, make_rerank_golden.py): each pair's
        relevance is sigmoid(logit(yes) - logit(no)) of the model card's prompt,
        against transformers in float64 (within 1e-5), sorted, cut to top_n."""
        d = "tests/golden/qwen3_reranker_tiny"
        with open(os.path.join(d, "golden.json")) as f:
            golden = json.load(f)
        # The directory with --rerank (the logits of yes and no), and llama.cpp's
        # reranker GGUF of it, which serves rerank by itself (no lm_head: its
        # cls.output rows times the last hidden row) and refuses generation.
        for flags in ((f"--model={d}", "--rerank"), ("--model=tests/golden/gguf_qwen3_reranker/model.gguf",)):
            with self.subTest(flags=flags):
                self.rerank_checks(golden, flags)

    def rerank_checks(self, golden, flags):
        s = Server(*flags, "--max_seq_len=512", "--threads=2")
        try:
            for case in golden["rerank_requests"]:
                body = dict(case["request"])
                body.pop("model")
                for path in ("/v1/rerank", "/rerank"):
                    status, got = s.post(path, body)
                    self.assertEqual(status, 200, got)
                    want = case["expected_results_sorted"]
                    self.assertEqual([r["index"] for r in got["results"]], [r["index"] for r in want], path)
                    for g, w in zip(got["results"], want):
                        self.assertAlmostEqual(g["relevance_score"], w["relevance_score"], delta=1e-5)
                    self.assertEqual(got["usage"]["prompt_tokens"],
                                     sum(p["n_tokens"] for p in golden["pairs"] if p["query"] == body["query"]))
                top = dict(body, top_n=2, return_documents=True)
                status, got = s.post("/v1/rerank", top)
                self.assertEqual(status, 200, got)
                self.assertEqual(len(got["results"]), 2)
                first = got["results"][0]
                self.assertEqual(first["document"]["text"], body["documents"][first["index"]])
            for body, field in (({"documents": ["a"]}, "query"), ({"query": "q", "documents": []}, "documents"),
                                ({"query": "q", "documents": ["a", 3]}, "documents[1]"),
                                ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
                                ({"query": "q", "documents": ["a"], "rank": 1}, "rank")):
                status, got = s.post("/v1/rerank", body)
                self.assertEqual(status, 400, got)
                self.assertIn(field, got["error"]["message"])
            if flags[0].endswith(".gguf"):
                status, got = s.post("/v1/completions", {"prompt": "yes", "max_tokens": 2})
                self.assertEqual(status, 400, got)
                self.assertIn("model", got["error"]["message"])
        finally:
            s.close()


if __name__ == "__main__":
    openai_test.SERVER = sys.argv[1]
    openai_test.LOADGEN = sys.argv[2]
    sys.argv = sys.argv[:1]
    unittest.main()
