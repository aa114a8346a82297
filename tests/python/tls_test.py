#!/usr/bin/env python3
"""TLS on the real flover_server's gRPC and HTTP ports, with certificates
made by openssl at test time: the right CA streams tokens (Python client,
flover_client, flover_loadgen over gRPC and HTTPS, curl), while a plaintext
client, a wrong CA, and — with --tls_client_ca — a client without a
certificate all fail."""
import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.getcwd(), "clients", "python"))
import grpc  # noqa: E402

from flover_client import FloverClient  # noqa: E402

SERVER = CLIENT = LOADGEN = None


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def make_cert(d, name, ca, server):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            f"{name}.key", "-out", f"{name}.csr", cwd=d)
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server
                else "extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", f"{name}.pem", cwd=d)


def start(*flags):
    proc = subprocess.Popen([SERVER, "--model=builtin:tiny", "--listen=127.0.0.1:0",
                             "--http_listen=127.0.0.1:0", "--threads=1", *flags],
                            stdout=subprocess.PIPE, text=True)
    grpc_line = proc.stdout.readline().strip()
    http_line = proc.stdout.readline().strip()
    assert grpc_line.startswith("listening on "), grpc_line
    assert http_line.startswith("openai api on https://"), http_line
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, grpc_line[len("listening on "):], http_line[len("openai api on "):]


def stop(proc):
    proc.kill()
    proc.wait()
    proc.stdout.close()


def tokens(client):
    return sum(len(m.token_ids) for m in client.generate(token_ids=[1, 2], max_new_tokens=3,
                                                         temperature=0, timeout=30))


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.d = cls.tmp.name
        make_ca(d, "ca")
        make_ca(d, "other_ca")
        make_cert(d, "server", "ca", server=True)
        make_cert(d, "client", "ca", server=False)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.d, name)

    def test_tls_takes_the_right_ca_and_refuses_the_rest(self):
        proc, address, base_url = start(f"--tls_cert={self.path('server.pem')}",
                                         f"--tls_key={self.path('server.key')}")
        try:
            self.assertEqual(tokens(FloverClient(address, tls_ca=self.path("ca.pem"))), 3)
            for client in (FloverClient(address), FloverClient(address, tls_ca=self.path("other_ca.pem"))):
                with self.assertRaises(grpc.RpcError) as err:
                    tokens(client)
                self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
            out = subprocess.run([CLIENT, f"--target={address}", "--prompt_ids=1,2",
                                  "--max_new_tokens=2", f"--tls_ca={self.path('ca.pem')}", "--json"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            out = subprocess.run([CLIENT, f"--target={address}", "--prompt_ids=1,2",
                                  "--max_new_tokens=2", "--timeout_s=10"],
                                 capture_output=True, text=True, timeout=60)
            self.assertNotEqual(out.returncode, 0)
            for extra in ([], ["--http"]):
                target = address if not extra else base_url[len("https://"):-len("/v1")]
                out = subprocess.run([LOADGEN, f"--target={target}", "--rate=inf", "--num_requests=4",
                                      "--output_len=3", "--progress=false",
                                      f"--tls_ca={self.path('ca.pem')}", *extra],
                                     capture_output=True, text=True, timeout=120)
                self.assertIn("completed 4, failed 0", out.stdout, out.stdout + out.stderr)
            ok = subprocess.run(["curl", "-sS", "--cacert", self.path("ca.pem"), f"{base_url}/models"],
                                capture_output=True, text=True, timeout=30)
            self.assertEqual(ok.returncode, 0, ok.stderr)
            self.assertIn('"builtin:tiny"', ok.stdout)
            wrong = subprocess.run(["curl", "-sS", "--cacert", self.path("other_ca.pem"),
                                    f"{base_url}/models"], capture_output=True, text=True, timeout=30)
            self.assertEqual(wrong.returncode, 60, wrong.stderr)  # certificate problem
            plain = subprocess.run(["curl", "-sS", base_url.replace("https://", "http://") + "/models"],
                                   capture_output=True, text=True, timeout=30)
            self.assertNotEqual(plain.returncode, 0)
        finally:
            stop(proc)

    def test_mutual_tls_requires_a_client_certificate(self):
        proc, address, base_url = start(f"--tls_cert={self.path('server.pem')}",
                                         f"--tls_key={self.path('server.key')}",
                                         f"--tls_client_ca={self.path('ca.pem')}")
        try:
            with self.assertRaises(grpc.RpcError) as err:
                tokens(FloverClient(address, tls_ca=self.path("ca.pem")))
            self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(tokens(FloverClient(address, tls_ca=self.path("ca.pem"),
                                                 tls_cert=self.path("client.pem"),
                                                 tls_key=self.path("client.key"))), 3)
            no_cert = subprocess.run(["curl", "-sS", "--cacert", self.path("ca.pem"),
                                      f"{base_url}/models"], capture_output=True, text=True, timeout=30)
            self.assertNotEqual(no_cert.returncode, 0)
            with_cert = subprocess.run(["curl", "-sS", "--cacert", self.path("ca.pem"), "--cert",
                                        self.path("client.pem"), "--key", self.path("client.key"),
                                        f"{base_url}/models"], capture_output=True, text=True,
                                       timeout=30)
            self.assertEqual(with_cert.returncode, 0, with_cert.stderr)
        finally:
            stop(proc)

    def test_bad_tls_flags_are_refused_by_name(self):
        for flags, says in (
                ([f"--tls_cert={self.path('server.pem')}"], "--tls_cert and --tls_key go together"),
                ([f"--tls_client_ca={self.path('ca.pem')}"], "--tls_client_ca needs --tls_cert"),
                ([f"--tls_cert={self.path('server.pem')}", f"--tls_key={self.path('client.key')}",
                  "--http_listen=127.0.0.1:0"], "not a matching PEM certificate and key")):
            r = subprocess.run([SERVER, "--model=builtin:tiny", "--listen=127.0.0.1:0", *flags],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(says, r.stderr)


if __name__ == "__main__":
    SERVER, CLIENT, LOADGEN = sys.argv[1:4]
    del sys.argv[1:4]
    # Bazel ends a test past its timeout with SIGTERM: print where each thread was.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    unittest.main()
