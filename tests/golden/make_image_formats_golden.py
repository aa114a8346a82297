#!/usr/bin/env python
"""Regenerate tests/golden/image_formats: WebP files and JPEGs with EXIF orientations, and the RGB
transformers' processors see for each.

Usage (from the repository root, in a venv with pillow, numpy, safetensors, transformers 5.x):
    python tests/golden/make_image_formats_golden.py

Writes tests/golden/image_formats/:
  lossless.webp     the gradient fixture image (tests/golden/idefics3_tiny/gradient_37x23.png), lossless WebP
  lossy.webp        the photo fixture (tests/golden/qwen3vl_tiny/photo_52x36.jpg), lossy WebP at quality 80
  alpha.webp        a 29 x 17 RGBA image with a soft alpha gradient, lossless WebP
  animated.webp     two frames (refused: a still image is wanted)
  exif_<N>.jpg      the photo as a JPEG (quality 95) whose EXIF says orientation N (2..8)
  golden.safetensors  "<file>.rgb": uint8 [H, W, 3], what the processors see: Pillow's decoding, then
                    PIL.ImageOps.exif_transpose (as transformers.image_utils.load_image applies it), then
                    transformers.image_transforms.convert_to_rgb (alpha composited onto white)
  golden.json       per file: width and height after orientation, mode, orientation

Deterministic; no network.
"""
import io
import json
import os

import numpy as np
import PIL
from PIL import Image, ImageOps
from safetensors.numpy import save_file
import transformers
from transformers.image_transforms import convert_to_rgb

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "image_formats")


def seen(data):
    """The RGB a processor sees for these file bytes, as transformers' load_image makes it."""
    im = Image.open(io.BytesIO(data))
    im = ImageOps.exif_transpose(im)
    return np.asarray(convert_to_rgb(im)), im.mode


def main():
    os.makedirs(OUT, exist_ok=True)
    gradient = Image.open(os.path.join(HERE, "idefics3_tiny", "gradient_37x23.png")).convert("RGB")
    photo = Image.open(os.path.join(HERE, "qwen3vl_tiny", "photo_52x36.jpg")).convert("RGB")
    y, x = np.mgrid[0:17, 0:29]
    rgba = np.stack([x * 8, y * 15, (x + y) * 5, np.clip(x * 9, 0, 255)], axis=-1).astype(np.uint8)
    files = {}
    buf = io.BytesIO()
    gradient.save(buf, "WEBP", lossless=True)
    files["lossless.webp"] = buf.getvalue()
    buf = io.BytesIO()
    photo.save(buf, "WEBP", quality=80)
    files["lossy.webp"] = buf.getvalue()
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "WEBP", lossless=True)
    files["alpha.webp"] = buf.getvalue()
    buf = io.BytesIO()
    gradient.save(buf, "WEBP", save_all=True, append_images=[photo.resize(gradient.size)], lossless=True, duration=100)
    files["animated.webp"] = buf.getvalue()
    for orientation in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        buf = io.BytesIO()
        photo.save(buf, "JPEG", quality=95, exif=exif.tobytes())
        files[f"exif_{orientation}.jpg"] = buf.getvalue()

    tensors, meta = {}, {"generator": "tests/golden/make_image_formats_golden.py",
                         "versions": {"pillow": PIL.__version__, "transformers": transformers.__version__,
                                      "numpy": np.__version__},
                         "files": {}}
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        entry = {"bytes": len(data)}
        if name != "animated.webp":
            rgb, mode = seen(data)
            tensors[name + ".rgb"] = np.ascontiguousarray(rgb)
            entry.update(width=int(rgb.shape[1]), height=int(rgb.shape[0]), mode=mode)
        if name.startswith("exif_"):
            entry["orientation"] = int(name[5])
        meta["files"][name] = entry
    save_file(tensors, os.path.join(OUT, "golden.safetensors"))
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
