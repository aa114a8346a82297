#!/usr/bin/env python3
"""API keys on the real flover_server: gRPC calls and /v1/* over HTTP need
`authorization: Bearer KEY` from --api_key_file (UNAUTHENTICATED / 401
otherwise), health stays open, and SIGHUP swaps the keys."""
import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.getcwd(), "clients", "python"))
import grpc  # noqa: E402
import openai  # noqa: E402

from flover_client import FloverClient  # noqa: E402

SERVER = None
CLIENT = None
MODEL = "tests/golden/tiny_f32"


class AuthTest(unittest.TestCase):
    def test_keys_on_grpc_and_http_and_reload_on_sighup(self):
        with tempfile.TemporaryDirectory() as d:
            keys = os.path.join(d, "keys")
            with open(keys, "w") as f:
                f.write("# test keys\nkey-one\nkey-two\n")
            proc = subprocess.Popen([SERVER, f"--model={MODEL}", "--listen=127.0.0.1:0",
                                     "--http_listen=127.0.0.1:0", f"--api_key_file={keys}",
                                     "--threads=1"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            try:
                address = proc.stdout.readline().strip()[len("listening on "):]
                base_url = proc.stdout.readline().strip()[len("openai api on "):]
                threading.Thread(target=proc.stdout.read, daemon=True).start()

                def grpc_call(key):
                    return list(FloverClient(address, api_key=key).generate(
                        token_ids=[1, 2], max_new_tokens=3, temperature=0))

                for key in (None, "key-three", "key-on"):
                    with self.assertRaises(grpc.RpcError) as err:
                        grpc_call(key)
                    self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED, key)
                    with self.assertRaises(grpc.RpcError) as err:
                        FloverClient(address, api_key=key).stats()
                    self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED, key)
                self.assertEqual(sum(len(m.token_ids) for m in grpc_call("key-two")), 3)
                self.assertEqual(FloverClient(address, api_key="key-one").stats().requests_submitted, 1)
                # Health stays open.
                check = grpc.insecure_channel(address).unary_unary(
                    "/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                    response_deserializer=lambda b: b)
                self.assertEqual(check(b"", timeout=5), b"\x08\x01")

                # HTTP: the openai package with a wrong key gets 401 in OpenAI's shape.
                with self.assertRaises(openai.AuthenticationError) as err:
                    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).completions.create(
                        model=MODEL, prompt="Hello", max_tokens=2)
                self.assertEqual(err.exception.status_code, 401)
                self.assertEqual(err.exception.body["type"], "authentication_error")
                self.assertNotIn("key-one", str(err.exception.body))
                ok = openai.OpenAI(base_url=base_url, api_key="key-one", max_retries=0)
                self.assertEqual(ok.completions.create(model=MODEL, prompt="Hello", max_tokens=2,
                                                       extra_body={"ignore_eos": True})
                                 .usage.completion_tokens, 2)
                health = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                         base_url[:-len("/v1")] + "/health"],
                                        capture_output=True, text=True, timeout=30).stdout
                self.assertEqual(health, "200")

                # The command-line client takes the key too.
                out = subprocess.run([CLIENT, f"--target={address}", "--prompt_ids=1,2",
                                      "--max_new_tokens=2", "--api_key=key-two", "--json"],
                                     capture_output=True, text=True, timeout=60)
                self.assertEqual(out.returncode, 0, out.stderr)
                out = subprocess.run([CLIENT, f"--target={address}", "--prompt_ids=1,2",
                                      "--max_new_tokens=2"], capture_output=True, text=True,
                                     timeout=60)
                self.assertNotEqual(out.returncode, 0)
                self.assertIn("UNAUTHENTICATED", out.stdout + out.stderr)

                # SIGHUP: the new file's keys replace the old ones.
                with open(keys, "w") as f:
                    f.write("key-three\n")
                proc.send_signal(signal.SIGHUP)
                deadline = time.monotonic() + 30
                swapped = False
                while time.monotonic() < deadline and not swapped:
                    try:
                        grpc_call("key-three")
                        swapped = True
                    except grpc.RpcError:
                        time.sleep(0.05)
                self.assertTrue(swapped, "SIGHUP did not load the new key")
                with self.assertRaises(grpc.RpcError) as err:
                    grpc_call("key-one")
                self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                self.assertIsNone(proc.poll())  # SIGHUP does not stop the server
            finally:
                proc.kill()
                proc.wait()
                proc.stdout.close()
                stderr = proc.stderr.read()
                proc.stderr.close()
            for key in ("key-one", "key-two", "key-three"):
                self.assertNotIn(key, stderr)  # keys are never logged


if __name__ == "__main__":
    SERVER = sys.argv.pop(1)
    CLIENT = sys.argv.pop(1)
    # Bazel ends a test past its timeout with SIGTERM: print where each thread was.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    unittest.main()
