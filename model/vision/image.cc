#include "model/vision/image.h"

// clang-format off
#include <csetjmp>
#include <cstdio>
#include <png.h>
#include <jpeglib.h>
#include <webp/decode.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace flover {
namespace {

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

absl::Status CheckSize(const char* format, int64_t width, int64_t height, const ImageLimits& limits) {
  if (width < 1 || height < 1 || width > (1 << 24) || height > (1 << 24) || width * height > limits.max_pixels) {
    return Bad(absl::StrCat("the ", format, " image is ", width, " x ", height, " pixels; at most ", limits.max_pixels,
                            " pixels are taken"));
  }
  return absl::OkStatus();
}

// RGBA onto white: c * a / 255 + 255 * (1 - a / 255), rounded (Pillow's
// alpha_composite over a white background, as transformers' convert_to_rgb
// does it).
std::vector<uint8_t> OntoWhite(const std::vector<uint8_t>& rgba) {
  const size_t n = rgba.size() / 4;
  std::vector<uint8_t> rgb(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const int a = rgba[i * 4 + 3];
    for (int c = 0; c < 3; ++c) rgb[i * 3 + c] = static_cast<uint8_t>((rgba[i * 4 + c] * a + 255 * (255 - a) + 127) / 255);
  }
  return rgb;
}

// ---- PNG ---------------------------------------------------------------------

struct PngReader {
  absl::string_view bytes;
  size_t at = 0;
  char error[200] = "";
  jmp_buf jump;
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->bytes.size() - r->at < n) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, r->bytes.data() + r->at, n);
  r->at += n;
}

void PngError(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->error, sizeof(r->error), "%s", message);
  longjmp(r->jump, 1);
}

void PngWarning(png_structp, png_const_charp) {}

// Decodes into *out (RGB or RGBA per *channels); false with r.error set.
// Nothing with a destructor lives in this frame past setjmp.
bool DecodePngInto(PngReader& r, const ImageLimits& limits, std::vector<uint8_t>* out, int* width, int* height,
                   int* channels, absl::Status* size_error) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, PngError, PngWarning);
  if (png == nullptr) {
    std::snprintf(r.error, sizeof(r.error), "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  std::vector<png_bytep>* rows = new std::vector<png_bytep>;
  if (setjmp(r.jump)) {
    png_destroy_read_struct(&png, &info, nullptr);
    delete rows;
    return false;
  }
  png_set_read_fn(png, &r, PngRead);
  png_set_user_limits(png, 1 << 24, 1 << 24);
  png_read_info(png, info);
  const int64_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (absl::Status st = CheckSize("PNG", w, h, limits); !st.ok()) {
    *size_error = st;
    png_destroy_read_struct(&png, &info, nullptr);
    delete rows;
    return false;
  }
  png_set_expand(png);  // palette and low grey bit depths to 8 bits, tRNS to alpha
  png_set_strip_16(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int c = png_get_channels(png, info);
  if (c != 3 && c != 4) png_error(png, "an unexpected channel count after conversion");
  out->resize(static_cast<size_t>(w) * h * c);
  rows->resize(h);
  for (int64_t y = 0; y < h; ++y) (*rows)[y] = out->data() + static_cast<size_t>(y) * w * c;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  delete rows;
  *width = static_cast<int>(w);
  *height = static_cast<int>(h);
  *channels = c;
  return true;
}

// ---- JPEG --------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr base;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
};

void JpegExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  longjmp(e->jump, 1);
}

void JpegSilent(j_common_ptr, int) {}

// EXIF's orientation (tag 0x0112 of IFD0) in an APP1 marker's data, or 1
// (as stored) where it has none or it is malformed.
int ExifOrientation(const uint8_t* p, size_t n) {
  if (n < 14 || std::memcmp(p, "Exif\0\0", 6) != 0) return 1;
  p += 6;
  n -= 6;
  const bool little = p[0] == 'I' && p[1] == 'I';
  if (!little && !(p[0] == 'M' && p[1] == 'M')) return 1;
  auto u16 = [&](size_t at) { return little ? p[at] | p[at + 1] << 8 : p[at] << 8 | p[at + 1]; };
  auto u32 = [&](size_t at) {
    return little ? uint32_t{p[at]} | uint32_t{p[at + 1]} << 8 | uint32_t{p[at + 2]} << 16 | uint32_t{p[at + 3]} << 24
                  : uint32_t{p[at]} << 24 | uint32_t{p[at + 1]} << 16 | uint32_t{p[at + 2]} << 8 | uint32_t{p[at + 3]};
  };
  if (u16(2) != 42) return 1;
  const uint32_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  const int entries = u16(ifd);
  for (int i = 0; i < entries; ++i) {
    const size_t at = ifd + 2 + static_cast<size_t>(i) * 12;
    if (at + 12 > n) return 1;
    if (u16(at) == 0x0112 && u16(at + 2) == 3) {  // SHORT
      const int v = u16(at + 8);
      return v >= 1 && v <= 8 ? v : 1;
    }
  }
  return 1;
}

bool DecodeJpegInto(absl::string_view bytes, const ImageLimits& limits, std::vector<uint8_t>* out, int* width,
                    int* height, int* orientation, char* error, size_t error_size, absl::Status* size_error) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = JpegExit;
  err.base.emit_message = JpegSilent;
  if (setjmp(err.jump)) {
    std::snprintf(error, error_size, "%s", err.message);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1) *orientation = ExifOrientation(m->data, m->data_length);
    if (*orientation != 1) break;
  }
  if (absl::Status st = CheckSize("JPEG", cinfo.image_width, cinfo.image_height, limits); !st.ok()) {
    *size_error = st;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    std::snprintf(error, error_size, "CMYK JPEG images are not supported");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int w = static_cast<int>(cinfo.output_width), h = static_cast<int>(cinfo.output_height);
  out->resize(static_cast<size_t>(w) * h * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->data() + static_cast<size_t>(cinfo.output_scanline) * w * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  *width = w;
  *height = h;
  return true;
}

// `image` as its EXIF orientation says it is shown (PIL.ImageOps.
// exif_transpose, which transformers' load_image applies): 2 mirrored, 3
// turned half round, 4 flipped, 5 transposed, 6 turned a quarter clockwise,
// 7 transversed, 8 a quarter counter-clockwise.
RgbImage Oriented(RgbImage image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int W = image.width, H = image.height;
  const bool swap = orientation >= 5;
  RgbImage out;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.pixels.resize(image.pixels.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // the stored pixel shown at (x, y)
      switch (orientation) {
        case 2: sx = W - 1 - x; break;
        case 3: sx = W - 1 - x; sy = H - 1 - y; break;
        case 4: sy = H - 1 - y; break;
        case 5: sx = y; sy = x; break;
        case 6: sx = y; sy = H - 1 - x; break;
        case 7: sx = W - 1 - y; sy = H - 1 - x; break;
        case 8: sx = W - 1 - y; sy = x; break;
      }
      std::memcpy(&out.pixels[(static_cast<size_t>(y) * out.width + x) * 3],
                  &image.pixels[(static_cast<size_t>(sy) * W + sx) * 3], 3);
    }
  }
  return out;
}

// ---- Pillow's resampling -----------------------------------------------------

constexpr int kPrecisionBits = 32 - 8 - 2;

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double Lanczos(double x) { return (x >= -3.0 && x < 3.0) ? Sinc(x) * Sinc(x / 3.0) : 0.0; }

// Pillow's bicubic (a = -0.5).
double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Pillow's bilinear: a triangle.
double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// A resampling filter: its kernel and support (in input pixels at scale 1).
struct Filter {
  double (*kernel)(double);
  double support;
};
constexpr Filter kLanczos{Lanczos, 3.0};
constexpr Filter kBicubic{Bicubic, 2.0};
constexpr Filter kBilinear{Triangle, 1.0};

// For each output pixel of a pass from `in` to `out` pixels: the first
// input pixel it reads, how many, and their fixed-point weights (ksize a
// pixel).
struct Coefficients {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

Coefficients Precompute(int in, int out, const Filter& filter) {
  Coefficients c;
  const double scale = static_cast<double>(in) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter.support * filterscale;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out);
  c.count.resize(out);
  c.weights.assign(static_cast<size_t>(out) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int xx = 0; xx < out; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // Truncation toward zero, then clamped, as the reference computes it.
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in) xmax = in;
    xmax -= xmin;
    double total = 0.0;
    int x = 0;
    for (; x < xmax; ++x) {
      const double w = filter.kernel((x + xmin - center + 0.5) * ss);
      k[x] = w;
      total += w;
    }
    for (x = 0; x < xmax; ++x) {
      if (total != 0.0) k[x] /= total;
    }
    for (; x < c.ksize; ++x) k[x] = 0;
    c.first[xx] = xmin;
    c.count[xx] = xmax;
    for (x = 0; x < c.ksize; ++x) {
      const double v = k[x] * (1 << kPrecisionBits);
      c.weights[static_cast<size_t>(xx) * c.ksize + x] = static_cast<int32_t>(v < 0 ? v - 0.5 : v + 0.5);
    }
  }
  return c;
}

uint8_t Clip8(int64_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One pass of Pillow's resampling: along rows (`horizontal`, to `size`
// pixels a row) or along columns (to `size` rows), each output sample the
// rounded fixed-point sum of its input taps in order.
RgbImage ResamplePass(const RgbImage& in, int size, bool horizontal, const Filter& filter) {
  const Coefficients c = Precompute(horizontal ? in.width : in.height, size, filter);
  RgbImage out;
  out.width = horizontal ? size : in.width;
  out.height = horizontal ? in.height : size;
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  const int lines = horizontal ? in.height : in.width;       // rows resampled, or columns
  const size_t tap = horizontal ? 3 : size_t{3} * in.width;  // bytes from one input tap to the next
  for (int o = 0; o < size; ++o) {
    const int32_t* k = c.weights.data() + static_cast<size_t>(o) * c.ksize;
    for (int line = 0; line < lines; ++line) {
      const size_t from = horizontal ? (static_cast<size_t>(line) * in.width + c.first[o]) * 3
                                     : (static_cast<size_t>(c.first[o]) * in.width + line) * 3;
      const size_t to = horizontal ? (static_cast<size_t>(line) * out.width + o) * 3
                                   : (static_cast<size_t>(o) * out.width + line) * 3;
      for (int ch = 0; ch < 3; ++ch) {
        int64_t ss = int64_t{1} << (kPrecisionBits - 1);
        for (int t = 0; t < c.count[o]; ++t) ss += int64_t{in.pixels[from + t * tap + ch]} * k[t];
        out.pixels[to + ch] = Clip8(ss);
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes, const ImageLimits& limits) {
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes) {
    return Bad(absl::StrCat("the image is ", bytes.size(), " bytes; at most ", limits.max_bytes, " are taken"));
  }
  static const char kPng[] = "\x89PNG\r\n\x1a\n";
  RgbImage image;
  absl::Status size_error;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) {
    PngReader r;
    r.bytes = bytes;
    std::vector<uint8_t> raw;
    int channels = 0;
    if (!DecodePngInto(r, limits, &raw, &image.width, &image.height, &channels, &size_error)) {
      if (!size_error.ok()) return size_error;
      return Bad(absl::StrCat("the PNG image cannot be decoded: ", r.error));
    }
    image.pixels = channels == 3 ? std::move(raw) : OntoWhite(raw);
    return image;
  }
  if (bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF && static_cast<uint8_t>(bytes[1]) == 0xD8 &&
      static_cast<uint8_t>(bytes[2]) == 0xFF) {
    char error[JMSG_LENGTH_MAX + 64] = "";
    int orientation = 1;
    if (!DecodeJpegInto(bytes, limits, &image.pixels, &image.width, &image.height, &orientation, error, sizeof(error),
                        &size_error)) {
      if (!size_error.ok()) return size_error;
      return Bad(absl::StrCat("the JPEG image cannot be decoded: ", error));
    }
    return Oriented(std::move(image), orientation);
  }
  if (bytes.size() >= 12 && std::memcmp(bytes.data(), "RIFF", 4) == 0 && std::memcmp(bytes.data() + 8, "WEBP", 4) == 0) {
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(data, bytes.size(), &f) != VP8_STATUS_OK) {
      return Bad("the WebP image cannot be decoded: its header is malformed or truncated");
    }
    if (f.has_animation) return Bad("animated WebP images are not supported (a still image is)");
    FLOVER_RETURN_IF_ERROR(CheckSize("WebP", f.width, f.height, limits));
    image.width = f.width;
    image.height = f.height;
    const size_t n = static_cast<size_t>(f.width) * f.height;
    std::vector<uint8_t> raw(n * (f.has_alpha ? 4 : 3));
    const uint8_t* done = f.has_alpha ? WebPDecodeRGBAInto(data, bytes.size(), raw.data(), raw.size(), f.width * 4)
                                      : WebPDecodeRGBInto(data, bytes.size(), raw.data(), raw.size(), f.width * 3);
    if (done == nullptr) return Bad("the WebP image cannot be decoded: its data is corrupt or truncated");
    image.pixels = f.has_alpha ? OntoWhite(raw) : std::move(raw);
    return image;
  }
  return Bad("the image is neither PNG, JPEG nor WebP (its first bytes name no format Flover reads)");
}

namespace {

RgbImage Resize(const RgbImage& image, int width, int height, const Filter& filter) {
  width = std::max(width, 1);
  height = std::max(height, 1);
  if (width == image.width && height == image.height) return image;
  if (width == image.width) return ResamplePass(image, height, /*horizontal=*/false, filter);
  RgbImage across = ResamplePass(image, width, /*horizontal=*/true, filter);
  return height == across.height ? across : ResamplePass(across, height, /*horizontal=*/false, filter);
}

}  // namespace

RgbImage ResizeLanczos(const RgbImage& image, int width, int height) { return Resize(image, width, height, kLanczos); }

RgbImage ResizeBicubic(const RgbImage& image, int width, int height) { return Resize(image, width, height, kBicubic); }

RgbImage ResizeBilinear(const RgbImage& image, int width, int height) {
  return Resize(image, width, height, kBilinear);
}

}  // namespace flover
