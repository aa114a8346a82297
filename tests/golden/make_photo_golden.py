#!/usr/bin/env python
"""Real-photograph, odd-size goldens for the three PIL-backend image processors and the PNG/JPEG decoders.

Usage (from the repository root, in a venv with transformers 5.x, pillow, numpy, safetensors, scikit-image):
    python tests/golden/make_photo_golden.py [--out DIR] [--no-native-check]

Sources: three photographs bundled in scikit-image's wheel (skimage.data; no download), each public domain or
CC0 per its skimage.data docstring (the licence text is copied into golden.json and README.md):
    chelsea()   -> chelsea_333x217.jpg    baseline JPEG, quality 90, 4:4:4 (no chroma subsampling)
    coffee()    -> coffee_201x299.jpg     progressive JPEG, quality 85, 4:2:0
    astronaut() -> astronaut_157x113.png  8-bit RGBA PNG with a soft diagonal alpha ramp (alpha 0 .. 255)
All three are crops (the astronaut after Pillow's Image.reduce(3), a 3x3 box average) written by Pillow.

Writes (default DIR = tests/golden/photos next to this script):
  the three image files above;
  golden.safetensors:
    "<image>.rgb"                      U8  [H, W, 3]  the RGB the processors see: transformers' convert_to_rgb of the
                                                      PIL image as opened (for the RGBA PNG: alpha composited onto
                                                      white by PIL.Image.alpha_composite; for the JPEGs: the decode)
    "<image>.rgba"                     U8  [H, W, 4]  (the PNG only) the decoded RGBA, before compositing
    "<image>.<processor>.pixel_values" F32 the processor's pixel_values, unchanged shape:
        idefics3 [1, tiles, 3, 32, 32]  (Idefics3ImageProcessorPil, tests/golden/idefics3_tiny settings)
        qwen3vl  [patches, 96]          (Qwen2VLImageProcessorPil,  tests/golden/qwen3vl_tiny settings)
        gemma3   [1, 3, 32, 32]         (Gemma3ImageProcessorPil,   tests/golden/gemma3vl_tiny settings)
  golden.json: versions, the processor settings read from the fixtures, per image (file, size, mode, encoding,
    source, licence, sha256 of the file and of the RGB arrays) and per (image, processor) (shape, sha256 of the
    float32 little-endian C-order bytes, image_grid_thw / rows+cols / num_crops, resize shapes), the tensor
    list, and "checks" (what was asserted or measured while generating, see below);
  README.md: sources, licences, what is in the folder.

The processors are loaded with <Class>Pil.from_pretrained(<fixture dir>) from the tiny fixtures' own
processor_config.json, so the settings are exactly those fixtures' (asserted: backend "pil", class name).
Each processor is fed the PIL image straight from Image.open (so do_convert_rgb sees the PNG's alpha); the RGB
it converts to is captured from its convert_to_rgb call and must equal "<image>.rgb", and feeding that uint8
RGB array back in must give bit-identical pixel_values.

checks in golden.json:
  * alpha_composite_table: all 65536 (channel, alpha) pairs composited onto white three ways - PIL's
    alpha_composite (what transformers does for a PIL input), (c*a + 255*(255-a) + 127) // 255 (the exact
    rounding; Flover's OntoWhite), and transformers' numpy-array path np.round(a/255*c + (1-a/255)*255) -
    and the pairs where they differ;
  * native_decode (unless --no-native-check, or no gcc / jpeglib.h / png.h): a small C program compiled against
    the system libjpeg (Debian libjpeg62-turbo) and libpng with Flover's decode settings (libjpeg defaults,
    out_color_space JCS_RGB; png_set_expand, strip_16, gray_to_rgb, interlace handling) decodes the three
    files; recorded is whether each equals Pillow's decode (Pillow bundles its own libjpeg-turbo) and whether
    OntoWhite of the libpng RGBA equals "<image>.rgb".

Deterministic: no randomness; rerunning rewrites identical files with the same library versions.
Generated with transformers 5.23.0, pillow 13.0.0, numpy 2.4.6, scikit-image 0.26.0, safetensors (see
golden.json "versions").
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image, JpegImagePlugin, features

import safetensors
import skimage
import skimage.data
import transformers
from safetensors.numpy import save_file
from transformers.image_transforms import convert_to_rgb
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> how it is made. Crop boxes are (left, top, right, bottom) in the (possibly reduced) source.
PHOTOS = {
    "chelsea_333x217": dict(
        source="chelsea", reduce=1, box=(70, 40, 403, 257), format="JPEG",
        save=dict(quality=90, subsampling=0, progressive=False, optimize=False),
        encoding="baseline JPEG, quality 90, 4:4:4 (subsampling=0), standard Huffman tables, JFIF, no EXIF"),
    "coffee_201x299": dict(
        source="coffee", reduce=1, box=(190, 40, 391, 339), format="JPEG",
        save=dict(quality=85, subsampling=2, progressive=True, optimize=False),
        encoding="progressive JPEG, quality 85, 4:2:0 (subsampling=2), JFIF, no EXIF"),
    "astronaut_157x113": dict(
        source="astronaut", reduce=3, box=(6, 8, 163, 121), format="PNG", alpha=True,
        save=dict(optimize=False, compress_level=9),
        encoding="PNG, 8-bit RGBA (color type 6), non-interlaced; alpha is a soft diagonal ramp from 0 (top left) "
                 "to 255 (bottom right), with fully transparent and fully opaque corners"),
}

LICENSES = {
    "chelsea": dict(
        title="Chelsea the cat",
        license="CC0 (public domain dedication)",
        license_text="No copyright restrictions.  CC0 by the photographer (Stefan van der Walt).",
        credit="Stefan van der Walt"),
    "coffee": dict(
        title="Coffee cup",
        license="CC0 (public domain dedication)",
        license_text="This photograph is courtesy of Pikolo Espresso Bar. ... No copyright restrictions.  CC0 by the "
                     "photographer (Rachel Michetti).",
        credit="Rachel Michetti, courtesy of Pikolo Espresso Bar"),
    "astronaut": dict(
        title="Color image of the astronaut Eileen Collins",
        license="Public domain (NASA)",
        license_text="This image was downloaded from the NASA Great Images database <https://flic.kr/p/r9qvLn>. "
                     "No known copyright restrictions, released into the public domain.",
        credit="NASA"),
}

FIXTURES = {  # processor name -> (class, fixture dir, tensor names it returns that we keep)
    "idefics3": (Idefics3ImageProcessorPil, "idefics3_tiny"),
    "qwen3vl": (Qwen2VLImageProcessorPil, "qwen3vl_tiny"),
    "gemma3": (Gemma3ImageProcessorPil, "gemma3vl_tiny"),
}


def sha256(b):
    if isinstance(b, np.ndarray):
        b = np.ascontiguousarray(b).tobytes()
    return hashlib.sha256(b).hexdigest()


def f32_bytes(a):
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


def alpha_ramp(w, h):
    """uint8 (h, w) alpha: 0 in the top-left corner, 255 in the bottom-right, every value in between."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    t = (x / (w - 1) + y / (h - 1)) / 2  # 0 .. 1 along the diagonal
    return np.round(np.clip((t - 0.15) / 0.7, 0.0, 1.0) * 255).astype(np.uint8)


def make_image(name, spec, out_dir):
    src = getattr(skimage.data, spec["source"])()
    assert src.dtype == np.uint8 and src.ndim == 3 and src.shape[2] == 3, src.shape
    im = Image.fromarray(src, "RGB")
    if spec["reduce"] > 1:
        im = im.reduce(spec["reduce"])
    im = im.crop(spec["box"])
    if spec.get("alpha"):
        a = alpha_ramp(*im.size)
        im = Image.fromarray(np.dstack([np.asarray(im), a]), "RGBA")
    path = os.path.join(out_dir, f"{name}.{'jpg' if spec['format'] == 'JPEG' else 'png'}")
    im.save(path, spec["format"], **spec["save"])
    return path, src.shape


def load_processors():
    procs, settings = {}, {}
    for pname, (cls, fixture) in FIXTURES.items():
        d = os.path.join(HERE, fixture)
        ip = cls.from_pretrained(d)
        assert type(ip).__name__ == cls.__name__ and ip.backend == "pil", (type(ip), ip.backend)
        procs[pname] = ip
        files = [f for f in ("processor_config.json", "preprocessor_config.json") if os.path.exists(os.path.join(d, f))]
        settings[pname] = {"class": cls.__name__, "fixture": f"tests/golden/{fixture}", "config_files": files,
                           "settings": json.loads(ip.to_json_string())}
    return procs, settings


def run_processor(pname, ip, path):
    """Runs ip on the image as opened; returns (outputs dict, the RGB uint8 HWC it converted to)."""
    seen = []
    orig = ip.convert_to_rgb

    def capture(image, *a, **k):
        r = orig(image, *a, **k)
        seen.append(np.array(r))
        return r

    ip.convert_to_rgb = capture
    try:
        with Image.open(path) as im:
            if pname == "idefics3":
                out = ip(images=[[im]], return_tensors="np", return_row_col_info=True)
            else:
                out = ip(images=[im], return_tensors="np")
    finally:
        del ip.convert_to_rgb
    assert len(seen) == 1, len(seen)
    rgb = seen[0]
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3, rgb.shape
    return out, rgb


def describe(pname, ip, out, rgb):
    pv = np.asarray(out["pixel_values"])
    assert pv.dtype == np.float32, pv.dtype
    e = {"pixel_values_shape": list(pv.shape), "pixel_values_dtype": "float32",
         "pixel_values_sha256": sha256(f32_bytes(pv)),
         "pixel_values_min": float(pv.min()), "pixel_values_max": float(pv.max())}
    chw = np.ascontiguousarray(rgb.transpose(2, 0, 1))
    if pname == "idefics3":
        rows, cols = int(out["rows"][0][0]), int(out["cols"][0][0])
        e.update(rows=rows, cols=cols, tiles=int(pv.shape[1]),
                 pixel_attention_mask_shape=list(out["pixel_attention_mask"].shape),
                 pixel_attention_mask_all_ones=bool(np.all(out["pixel_attention_mask"] == 1)))
        assert e["tiles"] == (rows * cols + 1 if rows * cols else 1)
        r1 = ip.resize(chw, size=ip.size, resample=ip.resample)
        r2 = ip.resize_for_vision_encoder(r1, ip.max_image_size["longest_edge"], resample=ip.resample)
        e["resize_longest_edge_hw"] = list(r1.shape[1:])
        e["resize_for_vision_encoder_hw"] = list(r2.shape[1:])
        e["layout"] = ("tiles row-major (rows x cols crops of the resize_for_vision_encoder image), then the "
                       "global image (that image resized to max_image_size x max_image_size); CHW each")
    elif pname == "qwen3vl":
        g = [int(x) for x in np.asarray(out["image_grid_thw"]).reshape(-1)]
        e.update(image_grid_thw=g, resized_hw=[g[1] * ip.patch_size, g[2] * ip.patch_size])
        assert pv.shape[0] == g[0] * g[1] * g[2]
        e["layout"] = ("one row per patch, in merge-window order; each row is C x temporal(2, the frame repeated) "
                       "x patch x patch")
    elif pname == "gemma3":
        e.update(num_crops=[int(x) for x in np.asarray(out["num_crops"]).reshape(-1)])
        e["layout"] = "NCHW, the image resized to size.height x size.width"
    return e


def alpha_table():
    """All (c, a) onto white, three ways; returns (json summary, pil table)."""
    c = np.repeat(np.arange(256, dtype=np.uint8), 256)
    a = np.tile(np.arange(256, dtype=np.uint8), 256)
    rgba = np.stack([c, c, c, a], -1).reshape(256, 256, 4)
    white = Image.new("RGBA", (256, 256), (255, 255, 255, 255))
    pil = np.asarray(Image.alpha_composite(white, Image.fromarray(rgba, "RGBA")).convert("RGB"))[..., 0].reshape(-1)
    ci, ai = c.astype(np.int64), a.astype(np.int64)
    exact = (ci * ai + 255 * (255 - ai) + 127) // 255
    af = ai / 255
    np_path = np.round(af * ci + (1 - af) * 255).astype(np.int64)
    out = {"pairs": 65536}
    for nm, t in (("exact_rounding", exact), ("transformers_numpy_path", np_path)):
        bad = np.nonzero(pil.astype(np.int64) != t)[0]
        out[f"pil_vs_{nm}_mismatches"] = int(bad.size)
        out[f"pil_vs_{nm}_max_abs_diff"] = int(np.abs(pil.astype(np.int64) - t).max())
        out[f"pil_vs_{nm}_examples_c_a_pil_other"] = [[int(ci[i]), int(ai[i]), int(pil[i]), int(t[i])] for i in bad[:8]]
    out["alpha0_gives_255"] = bool(np.all(pil[ai == 0] == 255))
    out["alpha255_gives_c"] = bool(np.all(pil[ai == 255] == ci[ai == 255]))
    return out


NATIVE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <png.h>
#define STR(x) #x
#define XSTR(x) STR(x)
/* decode FILE -> stdout: "W H C\n" then W*H*C bytes. Flover's settings (model/vision/image.cc). */
int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--versions") == 0) {
    printf("libjpeg-turbo %s (JPEG_LIB_VERSION %d); libpng %s\n", XSTR(LIBJPEG_TURBO_VERSION), JPEG_LIB_VERSION,
           png_get_libpng_ver(NULL));
    return 0;
  }
  FILE* f = fopen(argv[2], "rb");
  if (!f) return 2;
  if (strcmp(argv[1], "jpeg") == 0) {
    struct jpeg_decompress_struct cinfo; struct jpeg_error_mgr err;
    cinfo.err = jpeg_std_error(&err);
    jpeg_create_decompress(&cinfo);
    jpeg_stdio_src(&cinfo, f);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    int w = cinfo.output_width, h = cinfo.output_height;
    unsigned char* buf = malloc((size_t)w * h * 3);
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = buf + (size_t)cinfo.output_scanline * w * 3;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo); jpeg_destroy_decompress(&cinfo);
    printf("%d %d 3\n", w, h); fwrite(buf, 1, (size_t)w * h * 3, stdout);
  } else {
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) return 3;
    png_init_io(png, f);
    png_read_info(png, info);
    png_set_expand(png); png_set_strip_16(png); png_set_gray_to_rgb(png); png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int w = png_get_image_width(png, info), h = png_get_image_height(png, info), c = png_get_channels(png, info);
    unsigned char* buf = malloc((size_t)w * h * c);
    png_bytep* rows = malloc(sizeof(png_bytep) * h);
    for (int y = 0; y < h; ++y) rows[y] = buf + (size_t)y * w * c;
    png_read_image(png, rows); png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    printf("%d %d %d\n", w, h, c); fwrite(buf, 1, (size_t)w * h * c, stdout);
  }
  return 0;
}
"""


def native_check(files, rgbs, rgbas):
    """Decodes with the system libjpeg/libpng; {"skipped": why} if that cannot be built here."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        return {"skipped": "no C compiler"}
    with tempfile.TemporaryDirectory() as td:
        src, exe = os.path.join(td, "dec.c"), os.path.join(td, "dec")
        with open(src, "w") as f:
            f.write(NATIVE_C)
        r = subprocess.run([gcc, "-O2", "-o", exe, src, "-ljpeg", "-lpng"], capture_output=True, text=True)
        if r.returncode != 0:
            return {"skipped": "could not build against jpeglib.h/png.h: " + r.stderr.strip()[:300]}
        res = {"library_versions": subprocess.run([exe, "--versions"], capture_output=True, text=True).stdout.strip()}
        try:
            dpkg = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", "libjpeg62-turbo",
                                   "libpng16-16"], capture_output=True, text=True).stdout.strip().splitlines()
            res["debian_packages"] = dpkg
        except OSError:
            pass
        for name, path in files.items():
            kind = "jpeg" if path.endswith(".jpg") else "png"
            raw = subprocess.run([exe, kind, path], capture_output=True, check=True).stdout
            head, body = raw.split(b"\n", 1)
            w, h, c = map(int, head.split())
            arr = np.frombuffer(body, np.uint8).reshape(h, w, c)
            e = {"channels": c}
            if c == 3:
                d = np.abs(arr.astype(np.int16) - rgbs[name].astype(np.int16))
                e.update(equal_to_pillow=bool(d.max() == 0), max_abs_diff=int(d.max()), pixels_differing=int((d > 0).any(-1).sum()))
            else:
                d = np.abs(arr.astype(np.int16) - rgbas[name].astype(np.int16))
                e.update(rgba_equal_to_pillow=bool(d.max() == 0), rgba_max_abs_diff=int(d.max()))
                ai = arr[..., 3:4].astype(np.int64)
                onto = ((arr[..., :3].astype(np.int64) * ai + 255 * (255 - ai) + 127) // 255).astype(np.uint8)
                d2 = np.abs(onto.astype(np.int16) - rgbs[name].astype(np.int16))
                e.update(onto_white_exact_rounding_equal_to_rgb=bool(d2.max() == 0), onto_white_max_abs_diff=int(d2.max()),
                         onto_white_pixels_differing=int((d2 > 0).any(-1).sum()))
            res[name] = e
        return res


README = """# Real photographs at odd sizes: decoder and image-processor goldens

Written by `tests/golden/make_photo_golden.py` (see its docstring); do not edit by hand.

| file | source (scikit-image {skimage}) | licence | size | encoding |
|---|---|---|---|---|
{rows}

## Sources and licences

All three photographs come from scikit-image's bundled sample data (`skimage.data`, shipped inside the
scikit-image wheel; no download). Licence statements, quoted from the `skimage.data` docstrings:

{licenses}

The files here are crops (the astronaut after a 3x3 box reduction) re-encoded by Pillow {pillow}; for the
PNG, the alpha channel was added by the generator.

## Contents

* `golden.safetensors`:
  * `<image>.rgb` (U8, `[H, W, 3]`): the RGB the processors see, i.e. transformers' `convert_to_rgb` of the
    image as opened by Pillow. For the JPEGs that is the decode. For the RGBA PNG it is the image composited
    onto white with `PIL.Image.alpha_composite` (transformers {transformers} does not drop alpha);
    `Image.open(...).convert("RGB")`, which drops alpha, gives something else.
  * `<image>.rgba` (U8, `[H, W, 4]`, the PNG only): the decoded RGBA before compositing.
  * `<image>.<processor>.pixel_values` (F32): the processor's output, unchanged; processors
    `idefics3` (Idefics3ImageProcessorPil, settings of `../idefics3_tiny`), `qwen3vl` (Qwen2VLImageProcessorPil,
    settings of `../qwen3vl_tiny`), `gemma3` (Gemma3ImageProcessorPil, settings of `../gemma3vl_tiny`).
* `golden.json`: versions, processor settings, per-image and per-(image, processor) metadata (shapes,
  `image_grid_thw`, rows/cols, sha256 of the float32 little-endian bytes), and `checks`.
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "photos"))
    ap.add_argument("--no-native-check", action="store_true")
    args = ap.parse_args()
    out_dir = args.out
    os.makedirs(out_dir, exist_ok=True)

    procs, proc_settings = load_processors()
    tensors = {}
    tensor_doc = {}
    images = {}
    pairs = {}
    files = {}
    rgbs, rgbas = {}, {}
    checks = {}

    for name, spec in PHOTOS.items():
        path, src_shape = make_image(name, spec, out_dir)
        files[name] = path
        with open(path, "rb") as f:
            data = f.read()
        with Image.open(path) as im:
            im.load()
            mode, (w, h) = im.mode, im.size
            info = {"mode": mode, "format": im.format}
            if im.format == "JPEG":
                info["progressive"] = bool(im.info.get("progressive") or im.info.get("progression"))
                info["subsampling"] = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}.get(JpegImagePlugin.get_sampling(im), "?")
                info["components_sampling"] = [list(l[1:3]) for l in im.layer]
                info["exif"] = "exif" in im.info
            pil_convert_rgb = np.asarray(im.convert("RGB"))
            decoded = np.asarray(im)
        # what transformers' do_convert_rgb makes of the PIL image as opened
        with Image.open(path) as im:
            seen = convert_to_rgb(im, return_numpy=True)
        assert seen.shape == (h, w, 3) and seen.dtype == np.uint8
        rgbs[name] = seen
        tensors[f"{name}.rgb"] = np.ascontiguousarray(seen)
        tensor_doc[f"{name}.rgb"] = "uint8 [H, W, 3]: transformers convert_to_rgb of the image as Pillow opens it"
        if mode == "RGBA":
            rgbas[name] = decoded
            tensors[f"{name}.rgba"] = np.ascontiguousarray(decoded)
            tensor_doc[f"{name}.rgba"] = "uint8 [H, W, 4]: Pillow's decode of the RGBA PNG, before compositing"
            a = decoded[..., 3]
            info["alpha"] = {"min": int(a.min()), "max": int(a.max()), "distinct_values": int(np.unique(a).size),
                             "transparent_pixels": int((a == 0).sum()), "opaque_pixels": int((a == 255).sum())}
            diff = np.abs(pil_convert_rgb.astype(np.int16) - seen.astype(np.int16))
            info["pillow_convert_rgb_vs_processor_rgb"] = {
                "note": "Image.convert('RGB') drops alpha; transformers composites onto white",
                "equal": bool(diff.max() == 0), "max_abs_diff": int(diff.max()),
                "pixels_differing": int((diff > 0).any(-1).sum()),
                "pillow_convert_rgb_equals_rgba_without_alpha": bool(np.array_equal(pil_convert_rgb, decoded[..., :3])),
                "sha256_pillow_convert_rgb": sha256(pil_convert_rgb)}
        else:
            assert np.array_equal(pil_convert_rgb, seen), name  # no alpha: convert_to_rgb is the plain decode
        lic = LICENSES[spec["source"]]
        images[name] = {
            "file": os.path.basename(path), "width": w, "height": h, "bytes": len(data), "sha256_file": sha256(data),
            **info, "encoding": spec["encoding"], "pillow_save_kwargs": spec["save"],
            "source": {"function": f"skimage.data.{spec['source']}()", "source_shape_hwc": list(src_shape),
                       "reduce": spec["reduce"], "crop_box_ltrb": list(spec["box"]), **lic},
            "sha256_rgb": sha256(seen),
            "sha256_rgba": sha256(decoded) if mode == "RGBA" else None,
        }

        for pname, ip in procs.items():
            out, rgb_seen = run_processor(pname, ip, path)
            assert np.array_equal(rgb_seen, seen), (name, pname)
            # the RGB fully determines the output: feed it back as a uint8 HWC array
            if pname == "idefics3":
                again = ip(images=[[seen.copy()]], return_tensors="np")
            else:
                again = ip(images=[seen.copy()], return_tensors="np")
            assert np.array_equal(f32_bytes(again["pixel_values"]), f32_bytes(out["pixel_values"])), (name, pname)
            e = describe(pname, ip, out, seen)
            tname = f"{name}.{pname}.pixel_values"
            tensors[tname] = np.ascontiguousarray(out["pixel_values"], dtype=np.float32)
            tensor_doc[tname] = f"float32 {list(tensors[tname].shape)}: {proc_settings[pname]['class']} pixel_values"
            e["tensor"] = tname
            pairs[f"{name}.{pname}"] = {"image": name, "processor": pname, **e}

    checks["processor_rgb_equals_rgb_tensor"] = "asserted for every (image, processor)"
    checks["pixel_values_from_rgb_array_bit_identical"] = "asserted for every (image, processor)"
    checks["alpha_composite_table"] = alpha_table()
    if not args.no_native_check:
        checks["native_decode"] = native_check(files, rgbs, rgbas)

    st_path = os.path.join(out_dir, "golden.safetensors")
    save_file(tensors, st_path, metadata={"generator": "tests/golden/make_photo_golden.py"})
    os.chmod(st_path, 0o644)

    versions = {"transformers": transformers.__version__, "pillow": Image.__version__, "numpy": np.__version__,
                "scikit-image": skimage.__version__, "safetensors": safetensors.__version__,
                "python": sys.version.split()[0],
                "pillow_libjpeg_turbo": features.version("libjpeg_turbo"), "pillow_zlib": features.version("zlib")}
    golden = {
        "generator": "tests/golden/make_photo_golden.py",
        "versions": versions,
        "processors": proc_settings,
        "images": images,
        "cases": pairs,
        "tensors": {k: {"dtype": str(v.dtype), "shape": list(v.shape), "description": tensor_doc[k]}
                    for k, v in tensors.items()},
        "sha256_note": "sha256 of pixel_values is over the float32 little-endian C-order bytes; sha256_rgb/rgba over "
                       "the uint8 HWC bytes",
        "checks": checks,
    }
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, sort_keys=False)
        f.write("\n")

    rows = "\n".join(
        f"| `{v['file']}` | `{v['source']['function']}`: {v['source']['title']} | {v['source']['license']} | "
        f"{v['width']} x {v['height']} | {v['encoding']} |" for v in images.values())
    lic_txt = "\n".join(f"* `skimage.data.{k}()` ({v['title']}; credit: {v['credit']}): **{v['license']}**. "
                        f"\"{v['license_text']}\"" for k, v in LICENSES.items())
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(README.format(skimage=skimage.__version__, rows=rows, licenses=lic_txt, pillow=Image.__version__,
                              transformers=transformers.__version__))

    total = sum(os.path.getsize(os.path.join(out_dir, p)) for p in os.listdir(out_dir))
    print(f"wrote {out_dir}: {len(tensors)} tensors, {total} bytes")


if __name__ == "__main__":
    main()
