#!/usr/bin/env python3
"""Images through the real flover_server on loopback, driven by the official
`openai` package (and the Messages API, gRPC through the Python client, and
flover_client --image): the tiny SmolVLM fixture (tests/golden/idefics3_tiny,
written by make_idefics3_golden.py with transformers 5.23 in float64) takes a
PNG as a data: URL in an image_url part, and answers with transformers'
greedy tokens for the same chat; the prompt it computed is the processor's
(its token count). So do the tiny Qwen3-VL and Qwen3.5 fixtures
(tests/golden/qwen3vl_tiny, qwen35vl_tiny), and the tiny Gemma 3 one
(gemma3vl_tiny), whose image rows attend to each other both ways. What cannot be taken is a 400 naming the part: an image
to a text-only model, a remote URL, bytes that are not an image. With
--tp2 the server runs as two tensor-parallel ranks under mpirun (the tower
on rank 0, the given rows sent to rank 1 with each step) and must give the
same tokens."""
import base64
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_test  # noqa: E402
from openai_test import CHAT_MODEL, Server  # noqa: E402

import openai  # noqa: E402

FIXTURE = "tests/golden/idefics3_tiny"


def data_url(path):
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode()


TP2 = False


QWEN = "tests/golden/qwen3vl_tiny"
QWEN35 = "tests/golden/qwen35vl_tiny"
GEMMA3 = "tests/golden/gemma3vl_tiny"


class VisionTest(unittest.TestCase):
    def assertImageChat(self, s, folder, images, texts, want, case):
        """A user turn of `images` (files in `folder`), each followed by its
        text, through gRPC: transformers' greedy tokens and prompt length."""
        parts = []
        for image, text in zip(images, texts):
            with open(os.path.join(folder, image), "rb") as f:
                parts.append({"type": "image", "image": f.read()})
            parts.append({"type": "text", "text": text})
        ids, _, _, last = s.grpc_generate(messages=[{"role": "user", "content": parts}], max_new_tokens=8,
                                          temperature=0)
        self.assertEqual(list(ids), want["greedy_8"], case)
        self.assertEqual(last.usage.prompt_tokens, len(want["input_ids"]), case)

    def test_qwen3_vl_chats_match_transformers(self):
        """Qwen3-VL (tests/golden/make_qwen3vl_golden.py) and Qwen3.5 (its
        tower without deepstack beside a hybrid language model;
        make_qwen35vl_golden.py): each image at its own resolution, its rows
        at multimodal rotary positions (with deepstack additions on Qwen3-VL);
        the fixtures' one- and two-image chats give transformers' greedy
        tokens and prompt length through the openai package and gRPC (under
        --tp2 the positions and additions go to rank 1 with each step), and a
        JPEG its token count."""
        for fixture in (QWEN, QWEN35):
            with open(os.path.join(fixture, "golden.json")) as f:
                golden = json.load(f)
            s = Server(f"--model={fixture}", "--max_seq_len=512", "--threads=2")
            try:
                model = s.openai.models.list().data[0].id
                for case in ("one_image", "two_images"):
                    want = golden["cases"][case]
                    names = iter(want["images"])
                    content, parts = [], []
                    for part in want["messages"][0]["content"]:
                        if part["type"] == "image":
                            with open(os.path.join(fixture, golden["images"][next(names)]["file"]), "rb") as f:
                                data = f.read()
                            content.append({"type": "image_url", "image_url": {
                                "url": "data:image/png;base64," + base64.b64encode(data).decode()}})
                            parts.append({"type": "image", "image": data})
                        else:
                            content.append({"type": "text", "text": part["text"]})
                            parts.append({"type": "text", "text": part["text"]})
                    reply = s.openai.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0,
                        extra_body={"ignore_eos": True})
                    self.assertEqual(reply.usage.prompt_tokens, want["num_tokens"], (fixture, case))
                    self.assertEqual(reply.usage.completion_tokens, 8, (fixture, case))
                    ids, _, _, last = s.grpc_generate(messages=[{"role": "user", "content": parts}],
                                                      max_new_tokens=8, temperature=0)
                    self.assertEqual(list(ids), want["greedy_8"], (fixture, case))
                    self.assertEqual(last.usage.prompt_tokens, want["num_tokens"], (fixture, case))
                    if fixture == QWEN:  # no reasoning parser: the reply's text is the tokens'
                        status, expected = s.post("/detokenize", {"tokens": want["greedy_8"]})
                        self.assertEqual(status, 200, expected)
                        self.assertEqual(reply.choices[0].message.content, expected["content"], case)
                # A JPEG in the one-image chat's place: its 24 rows for the gradient's 15.
                one = golden["cases"]["one_image"]
                with open(os.path.join(fixture, "photo_52x36.jpg"), "rb") as f:
                    jpeg = "data:image/jpeg;base64," + base64.b64encode(f.read()).decode()
                reply = s.openai.chat.completions.create(
                    model=model, max_tokens=4, temperature=0, messages=[{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": jpeg}}, {"type": "text", "text": "What is this?"}]}])
                self.assertEqual(reply.usage.prompt_tokens,
                                 one["num_tokens"] - one["image_token_count"]
                                 + golden["images"]["photo_52x36"]["num_image_tokens"])
            finally:
                s.close()
        # llama.cpp's files: the Qwen3-VL fixture converted by its converter
        # (tests/golden/gguf_qwen3vl), --model=model.gguf --mmproj=mmproj.gguf.
        # The one-image chat gives transformers' tokens, for the image
        # Flover resizes as transformers does and for the one llama.cpp's
        # multimodal path needs not resize (llama_cpp.json: its tokens there
        # are these too).
        if not TP2:
            gguf = "tests/golden/gguf_qwen3vl"
            with open(os.path.join(QWEN, "golden.json")) as f:
                one = json.load(f)["cases"]["one_image"]
            with open(os.path.join(gguf, "llama_cpp.json")) as f:
                llama = json.load(f)["driver"]["one_image_no_resize"]
            s = Server(f"--model={gguf}/model.gguf", f"--mmproj={gguf}/mmproj.gguf", "--max_seq_len=512",
                       "--threads=2")
            try:
                for image in (os.path.join(QWEN, "gradient_37x23.png"), os.path.join(gguf, "gradient_40x24.png")):
                    with open(image, "rb") as f:
                        data = f.read()
                    ids, _, _, last = s.grpc_generate(
                        messages=[{"role": "user", "content": [{"type": "image", "image": data},
                                                               {"type": "text", "text": "What is this?"}]}],
                        max_new_tokens=8, temperature=0)
                    self.assertEqual(list(ids), one["greedy_8"], image)
                    self.assertEqual(last.usage.prompt_tokens, one["num_tokens"], image)
                self.assertEqual(llama["greedy_8"], one["greedy_8"])
            finally:
                s.close()
        # Qwen3.5 from llama.cpp's files (tests/golden/gguf_qwen35vl: a qwen35
        # text GGUF, hybrid, and its qwen3vl_merger mmproj without deepstack):
        # on images neither side resizes (transformers' resized pixels of the
        # fixture's) its one- and two-image chats give transformers' tokens,
        # as llama.cpp's own path does; so does its text chat.
        if not TP2:
            gguf = "tests/golden/gguf_qwen35vl"
            with open(os.path.join(QWEN35, "golden.json")) as f:
                golden = json.load(f)
            same_pixels = {"gradient_37x23": "gradient_40x24.png", "wide_100x61": "wide_64x40.png",
                           "tall_9x41": "tall_16x48.png"}
            s = Server(f"--model={gguf}/model.gguf", f"--mmproj={gguf}/mmproj.gguf", "--max_seq_len=512",
                       "--threads=2")
            try:
                for case in ("one_image", "two_images", "text_only"):
                    want = golden["cases"][case]
                    names = iter(want["images"])
                    messages = []
                    for m in want["messages"]:
                        if isinstance(m["content"], str):
                            messages.append(m)
                            continue
                        parts = []
                        for part in m["content"]:
                            if part["type"] == "image":
                                with open(os.path.join(gguf, same_pixels[next(names)]), "rb") as f:
                                    parts.append({"type": "image", "image": f.read()})
                            else:
                                parts.append({"type": "text", "text": part["text"]})
                        messages.append({"role": m["role"], "content": parts})
                    ids, _, _, last = s.grpc_generate(messages=messages, max_new_tokens=8, temperature=0)
                    self.assertEqual(list(ids), want["greedy_8"], case)
                    self.assertEqual(last.usage.prompt_tokens, want["num_tokens"], case)
            finally:
                s.close()
        # --max_image_tokens: the gradient (15 rows) resized down to at most
        # 12 (smart_resize with max_pixels 12 * 8 * 8: 16 x 32 pixels, 8 rows).
        if not TP2:
            with open(os.path.join(QWEN, "golden.json")) as f:
                one = json.load(f)["cases"]["one_image"]
            s = Server(f"--model={QWEN}", "--max_seq_len=512", "--threads=2", "--max_image_tokens=12")
            try:
                model = s.openai.models.list().data[0].id
                reply = s.openai.chat.completions.create(
                    model=model, max_tokens=2, temperature=0, messages=[{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": data_url(os.path.join(QWEN, "gradient_37x23.png"))}},
                        {"type": "text", "text": "What is this?"}]}])
                self.assertEqual(reply.usage.prompt_tokens, one["num_tokens"] - 15 + 8)
            finally:
                s.close()

    def test_gemma3_chats_match_transformers(self):
        """Gemma 3 (tests/golden/make_gemma3vl_golden.py): each image one
        896-px-style tile (32 px here) of 16 rows that attend to each other
        both ways; its chats (two PNGs and a JPEG) give transformers' greedy
        tokens and prompt length through the openai package and gRPC, with
        prompts chunked around the images (--max_tokens_per_step=20; under
        --tp2 the rows' horizons go to rank 1 with each step). A step budget
        below an image's rows is a 400 naming it."""
        fixture = GEMMA3
        with open(os.path.join(fixture, "golden.json")) as f:
            golden = json.load(f)
        question = "What is this? Describe the image in detail."
        s = Server(f"--model={fixture}", "--max_seq_len=256", "--threads=2", "--max_tokens_per_step=20")
        try:
            model = s.openai.models.list().data[0].id
            for case in ("gradient", "photo", "two_images"):
                want = golden["cases"][case]
                content, parts = [], []
                for i, name in enumerate(want["images"]):
                    with open(os.path.join(fixture, golden["images"][name]["file"]), "rb") as f:
                        data = f.read()
                    kind = "jpeg" if name.startswith("photo") else "png"
                    content.append({"type": "image_url", "image_url": {
                        "url": f"data:image/{kind};base64," + base64.b64encode(data).decode()}})
                    parts.append({"type": "image", "image": data})
                    text = "and" if i + 1 < len(want["images"]) else question
                    content.append({"type": "text", "text": text})
                    parts.append({"type": "text", "text": text})
                reply = s.openai.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0,
                    extra_body={"ignore_eos": True})
                self.assertEqual(reply.usage.prompt_tokens, len(want["input_ids"]), case)
                self.assertEqual(reply.usage.completion_tokens, 8, case)
                status, expected = s.post("/detokenize", {"tokens": want["greedy_8"]})
                self.assertEqual(status, 200, expected)
                self.assertEqual(reply.choices[0].message.content, expected["content"], case)
                ids, _, _, last = s.grpc_generate(messages=[{"role": "user", "content": parts}],
                                                  max_new_tokens=8, temperature=0)
                self.assertEqual(list(ids), want["greedy_8"], case)
        finally:
            s.close()
        if TP2:
            return
        # llama.cpp's files (tests/golden/gguf_gemma3vl): the text GGUF with
        # the window pattern and query scale its converter drops put back,
        # and its mmproj; on images it need not resize (32 x 32) the chats
        # give transformers' tokens, as llama.cpp's own path does.
        gguf = "tests/golden/gguf_gemma3vl"
        s = Server(f"--model={gguf}/model_swa2_qscale.gguf", f"--mmproj={gguf}/mmproj.gguf", "--max_seq_len=256",
                   "--threads=2")
        try:
            for case, images in (("gradient", ["gradient_32x32.png"]), ("photo", ["photo_32x32.png"]),
                                 ("two_images", ["gradient_32x32.png", "checker_32x32.png"])):
                texts = ["and"] * (len(images) - 1) + [question]
                self.assertImageChat(s, gguf, images, texts, golden["cases"][case], case)
        finally:
            s.close()
        # Pan-and-scan, where the checkpoint's processor turns it on (a copy of
        # the fixture whose processor_config.json does, its minimum crop
        # lowered to 8 px as the golden case asked): the gradient and its two
        # crops, each a run of 16 rows attending both ways, give
        # transformers' tokens.
        import shutil
        import tempfile
        want = golden["cases"]["pan_and_scan"]
        with tempfile.TemporaryDirectory() as panned:
            for name in os.listdir(fixture):
                shutil.copy(os.path.join(fixture, name), panned)
            with open(os.path.join(fixture, "processor_config.json")) as f:
                settings = json.load(f)
            settings["image_processor"].update(want["processor_kwargs"])
            with open(os.path.join(panned, "processor_config.json"), "w") as f:
                json.dump(settings, f)
            s = Server(f"--model={panned}", "--max_seq_len=256", "--threads=2", "--max_tokens_per_step=20")
            try:
                with open(os.path.join(fixture, "gradient_37x23.png"), "rb") as f:
                    png = f.read()
                ids, _, _, last = s.grpc_generate(messages=[{"role": "user", "content": [
                    {"type": "image", "image": png}, {"type": "text", "text": question}]}], max_new_tokens=8,
                    temperature=0)
                self.assertEqual(list(ids), want["greedy_8"])
                self.assertEqual(last.usage.prompt_tokens, len(want["input_ids"]))
            finally:
                s.close()
        s = Server(f"--model={fixture}", "--max_seq_len=256", "--threads=2", "--max_tokens_per_step=12")
        try:
            with open(os.path.join(fixture, "gradient_37x23.png"), "rb") as f:
                png = "data:image/png;base64," + base64.b64encode(f.read()).decode()
            with self.assertRaises(openai.BadRequestError) as e:
                s.openai.chat.completions.create(
                    model=s.openai.models.list().data[0].id, max_tokens=4, messages=[{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": png}}, {"type": "text", "text": "What?"}]}])
            self.assertIn("image 0 takes 16 rows, which attend to each other both ways", str(e.exception))
        finally:
            s.close()

    def test_smolvlm_from_llama_cpp_files(self):
        """SmolVLM from llama.cpp's files (tests/golden/gguf_idefics3: its
        converter's llama text GGUF and idefics3 mmproj of the tiny fixture):
        on images it need not resize (the 96 x 64 and 96 x 96 the processor
        resizes the fixture's to) the chats give transformers' tokens, as
        llama.cpp's own path does."""
        if TP2:
            return
        gguf = "tests/golden/gguf_idefics3"
        with open(os.path.join(FIXTURE, "golden.json")) as f:
            golden = json.load(f)
        s = Server(f"--model={gguf}/model.gguf", f"--mmproj={gguf}/mmproj.gguf", "--max_seq_len=1024", "--threads=2")
        try:
            for case, images, texts in (("gradient", ["gradient_96x64.png"], ["What is this?"]),
                                        ("two_images", ["gradient_96x64.png", "checker_96x96.png"], ["and", "?"])):
                self.assertImageChat(s, gguf, images, texts, golden["cases"][case], case)
        finally:
            s.close()

    def test_remote_images_come_only_from_named_hosts(self):
        """--image_url_hosts: an image_url part's http URL (and a Messages API
        url source) on a host it names is fetched (an HTTP server on
        loopback, an ephemeral port) and answered as the same image sent
        inline; another host, a missing file and a redirect are 400s naming
        the part and why; the server follows no redirect."""
        import functools
        import http.server
        import threading

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/moved.png":
                    self.send_response(302)
                    self.send_header("Location", "/gradient_37x23.png")
                    self.end_headers()
                    return
                super().do_GET()

        files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=FIXTURE))
        threading.Thread(target=files.serve_forever, daemon=True).start()
        port = files.server_address[1]
        with open(os.path.join(FIXTURE, "golden.json")) as f:
            want = json.load(f)["cases"]["gradient"]
        s = Server(f"--model={FIXTURE}", "--max_seq_len=1024", "--threads=2", f"--image_url_hosts=127.0.0.1:{port}")
        try:
            model = s.openai.models.list().data[0].id
            status, expected = s.post("/detokenize", {"tokens": want["greedy_8"]})
            url = f"http://127.0.0.1:{port}/gradient_37x23.png"
            reply = s.openai.chat.completions.create(model=model, max_tokens=8, temperature=0, messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                             {"type": "text", "text": "What is this?"}]}])
            self.assertEqual(reply.choices[0].message.content, expected["content"])
            self.assertEqual(reply.usage.prompt_tokens, len(want["input_ids"]))
            status, answer = s.post("/v1/messages", {
                "model": model, "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "url", "url": url}}, {"type": "text", "text": "What is this?"}]}]})
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["content"][0]["text"], expected["content"])
            for bad, why in ((f"http://localhost:{port}/gradient_37x23.png",
                              f"the host localhost:{port} is not one this server fetches images from"),
                             (f"http://127.0.0.1:{port}/missing.png", "gave HTTP 404"),
                             (f"http://127.0.0.1:{port}/moved.png", "gave HTTP 302 (redirects are not followed)")):
                with self.assertRaises(openai.BadRequestError) as e:
                    s.openai.chat.completions.create(model=model, max_tokens=2, messages=[{"role": "user", "content": [
                        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": bad}}]}])
                self.assertIn("messages[0].content[1]", str(e.exception))
                self.assertIn(why, str(e.exception))
        finally:
            s.close()
            files.shutdown()

    def test_image_chats_match_transformers(self):
        with open(os.path.join(FIXTURE, "golden.json")) as f:
            golden = json.load(f)
        s = Server(f"--model={FIXTURE}", "--max_seq_len=1024", "--threads=2")
        try:
            model = s.openai.models.list().data[0].id
            self.assertEqual(s.client.model_info().tp_size, 2 if TP2 else 1)
            for case, text in (("gradient", "What is this?"), ("two_images", None)):
                want = golden["cases"][case]
                pictures = [data_url(os.path.join(FIXTURE, golden["images"][name]["file"]))
                            for name in want["images"]]
                if text is not None:
                    content = [{"type": "image_url", "image_url": {"url": pictures[0]}},
                               {"type": "text", "text": text}]
                else:  # as the golden's template wrote it: image, "and", image, "?"
                    content = [{"type": "image_url", "image_url": {"url": pictures[0]}},
                               {"type": "text", "text": "and"},
                               {"type": "image_url", "image_url": {"url": pictures[1]}},
                               {"type": "text", "text": "?"}]
                reply = s.openai.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0,
                    logprobs=True)
                self.assertEqual(reply.usage.prompt_tokens, len(want["input_ids"]), case)
                status, expected = s.post("/detokenize", {"tokens": want["greedy_8"]})
                self.assertEqual(status, 200, expected)
                self.assertEqual(reply.choices[0].message.content, expected["content"], case)
                self.assertEqual(reply.usage.completion_tokens, 8, case)
            if TP2:
                return            # The Messages API's image block: the same chat, the same answer.
            want = golden["cases"]["gradient"]
            with open(os.path.join(FIXTURE, "gradient_37x23.png"), "rb") as f:
                png = base64.b64encode(f.read()).decode()
            status, reply = s.post("/v1/messages", {
                "model": model, "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
                    {"type": "text", "text": "What is this?"}]}]})
            self.assertEqual(status, 200, reply)
            status, expected = s.post("/detokenize", {"tokens": want["greedy_8"]})
            self.assertEqual(reply["content"][0]["text"], expected["content"])
            self.assertEqual(reply["usage"]["input_tokens"], len(want["input_ids"]))
            status, refused = s.post("/v1/messages", {
                "model": model, "max_tokens": 8, "messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]})
            self.assertEqual(status, 400, refused)
            self.assertIn("messages[0].content[0]: remote image URLs are off", json.dumps(refused))
            # gRPC: the Python client's image parts, and flover_client --image.
            png_bytes = base64.b64decode(png)
            ids, text, _, last = s.grpc_generate(
                messages=[{"role": "user", "content": [{"type": "image", "image": png_bytes},
                                                       {"type": "text", "text": "What is this?"}]}],
                max_new_tokens=8, temperature=0)
            self.assertEqual(list(ids), want["greedy_8"])
            self.assertEqual(last.usage.prompt_tokens, len(want["input_ids"]))
            out = subprocess.run([CLIENT, f"--target={s.grpc}", "--chat=What is this?",
                                  f"--image={os.path.join(FIXTURE, 'gradient_37x23.png')}", "--max_new_tokens=8",
                                  "--temperature=0"], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout, expected["content"] + "\n[length]\n")
            # Refusals, naming the part.
            bad = [({"url": "https://example.com/cat.png"}, "remote image URLs are off"),
                   ({"url": "ftp://example.com/cat.png"}, "only data:, http:// and https:// URLs are taken"),
                   ({"url": "data:image/png;base64,aGVsbG8gd29ybGQ="}, "neither PNG, JPEG nor WebP"),
                   ({"url": "data:image/png,rawbytes"}, "must be base64")]
            for image_url, why in bad:
                with self.assertRaises(openai.BadRequestError) as e:
                    s.openai.chat.completions.create(model=model, max_tokens=2, messages=[{"role": "user", "content": [
                        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": image_url}]}])
                self.assertIn("messages[0].content[1]", str(e.exception))
                self.assertIn(why, str(e.exception))
        finally:
            s.close()
        # --dtype=bf16: the tower's products in bf16 too (where the CPU runs
        # them): the same prompt, a whole answer (bf16 may pick other tokens).
        if not TP2:
            s = Server(f"--model={FIXTURE}", "--max_seq_len=1024", "--threads=2", "--dtype=bf16")
            try:
                model = s.openai.models.list().data[0].id
                want = golden["cases"]["gradient"]
                reply = s.openai.chat.completions.create(
                    model=model, max_tokens=8, temperature=0, messages=[{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": data_url(os.path.join(FIXTURE, "gradient_37x23.png"))}},
                        {"type": "text", "text": "What is this?"}]}], extra_body={"ignore_eos": True})
                self.assertEqual(reply.usage.prompt_tokens, len(want["input_ids"]))
                self.assertEqual(reply.usage.completion_tokens, 8)
            finally:
                s.close()
        # A text-only model takes no image.
        s = Server(f"--model={CHAT_MODEL}", "--max_seq_len=256", "--threads=2")
        try:
            model = s.openai.models.list().data[0].id
            with self.assertRaises(openai.BadRequestError) as e:
                s.openai.chat.completions.create(model=model, max_tokens=2, messages=[{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": data_url(os.path.join(FIXTURE, "gradient_37x23.png"))}}]}])
            self.assertIn("messages[0].content[0]", str(e.exception))
            self.assertIn("this model takes no images", str(e.exception))
        finally:
            s.close()


if __name__ == "__main__":
    openai_test.SERVER = sys.argv[1]
    CLIENT = sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3] == "--tp2":
        TP2 = True
        os.environ["FLOVER_SERVER"] = os.path.abspath(sys.argv[1])
        openai_test.SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpirun_server.sh")
    sys.argv = sys.argv[:1]
    unittest.main()
