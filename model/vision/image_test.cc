// Decoding and the SmolVLM, Qwen2-VL and Gemma 3 processors against
// transformers' processors (the Pillow ones) on the fixtures' images: the
// pixels of every tile bit for bit and the prompt text; bad bytes are
// refused saying why.
#include "model/vision/image.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <jpeglib.h>

#include "absl/strings/str_replace.h"
#include "model/loader/safetensors.h"
#include "model/vision/gemma3_processor.h"
#include "model/vision/idefics3_processor.h"
#include "model/vision/qwen2_vl_processor.h"
#include "testing/golden.h"
#include "nlohmann/json.hpp"

namespace flover {
namespace {

constexpr char kDir[] = "tests/golden/idefics3_tiny";

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// How many values of `got` differ from `want` (all of them where the sizes
// differ).
size_t Differing(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  size_t n = 0;
  for (size_t i = 0; i < got.size(); ++i) n += got[i] != want[i];
  return n;
}

TEST(Idefics3ProcessorTest, PixelsAndPromptTextMatchTransformers) {
  auto config = LoadIdefics3ProcessorConfig(kDir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->longest_edge, 96);
  EXPECT_EQ(config->tile, 32);
  EXPECT_EQ(config->rows_per_tile, 16);
  auto golden = SafetensorsFile::Open(std::string(kDir) + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  std::ifstream in(std::string(kDir) + "/golden.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  for (const std::string c : {"gradient", "gradient_nosplit", "two_images"}) {
    const auto& cm = meta["cases"][c];
    Idefics3ProcessorConfig cc = *config;
    if (cm["processor_kwargs"].contains("do_image_splitting")) cc.split = cm["processor_kwargs"]["do_image_splitting"];
    std::vector<float> pixels;
    std::string prompt = cm["prompt"];
    size_t at = 0;
    int index = 0;
    for (const auto& name : cm["images"]) {
      auto image = DecodeImage(Read(absl::StrCat(kDir, "/", meta["images"][name.get<std::string>()]["file"].get<std::string>())));
      ASSERT_TRUE(image.ok()) << image.status();
      EXPECT_EQ(image->width, meta["images"][name.get<std::string>()]["width"].get<int>());
      const ProcessedImage p = ProcessIdefics3Image(*image, cc);
      EXPECT_EQ(p.rows, cm["rows"][index].get<int>()) << c;
      EXPECT_EQ(p.cols, cm["cols"][index].get<int>()) << c;
      pixels.insert(pixels.end(), p.pixels.begin(), p.pixels.end());
      at = prompt.find("<image>", at);
      ASSERT_NE(at, std::string::npos);
      prompt.replace(at, 7, p.text);
      at += p.text.size();
      ++index;
    }
    EXPECT_EQ(prompt, cm["expanded_prompt"].get<std::string>()) << c;
    const TensorInfo* t = golden->Find(c + ".pixel_values");
    ASSERT_NE(t, nullptr);
    auto want = golden->ReadFloat(c + ".pixel_values", t->shape);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(pixels.size(), want->size()) << c;
    EXPECT_EQ(Differing(pixels, *want), 0u) << c << ": pixels that differ from transformers' processor";
  }
}

// Images far from square still make whole tiles: a side that would round
// to nothing is one tile.
TEST(Idefics3ProcessorTest, ThinImagesMakeWholeTiles) {
  Idefics3ProcessorConfig config;
  config.longest_edge = 96;
  config.tile = 32;
  config.rows_per_tile = 4;
  for (auto [w, h] : {std::pair{1, 5000}, std::pair{5000, 1}, std::pair{3, 97}}) {
    RgbImage image;
    image.width = w;
    image.height = h;
    image.pixels.assign(static_cast<size_t>(w) * h * 3, 200);
    const ProcessedImage p = ProcessIdefics3Image(image, config);
    EXPECT_GE(p.tiles, 1) << w << "x" << h;
    EXPECT_EQ(p.pixels.size(), static_cast<size_t>(p.tiles) * 3 * 32 * 32) << w << "x" << h;
    EXPECT_EQ(p.tiles, p.rows * p.cols + 1) << w << "x" << h;
    // A flat grey image stays flat: (200 / 255 - 0.5) / 0.5 everywhere.
    const float want = (static_cast<float>(200 * (1.0 / 255)) - 0.5f) / 0.5f;
    EXPECT_TRUE(std::all_of(p.pixels.begin(), p.pixels.end(), [&](float v) { return v == want; })) << w << "x" << h;
  }
}

// A JPEG written here (libjpeg, quality 95) decodes to its size and close
// to its pixels; grey too.
std::string Jpeg(int w, int h, bool grey) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = grey ? 1 : 3;
  cinfo.in_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<unsigned char> row(w * cinfo.input_components);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w * cinfo.input_components; ++x) row[x] = static_cast<unsigned char>((x * 7 + y * 3) % 256 / 2 + 60);
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buf), size);
  jpeg_destroy_compress(&cinfo);
  free(buf);
  return out;
}

TEST(DecodeImageTest, JpegAndRefusals) {
  for (bool grey : {false, true}) {
    auto image = DecodeImage(Jpeg(40, 24, grey));
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->width, 40);
    EXPECT_EQ(image->height, 24);
    const int want = (5 * 7 * (grey ? 1 : 3) + 4 * 3) % 256 / 2 + 60;  // pixel (x 5, y 4), first channel
    EXPECT_NEAR(image->at(4, 5, 0), want, 12);
    if (grey) EXPECT_EQ(image->at(4, 5, 0), image->at(4, 5, 2));
  }
  const std::string png = Read(std::string(kDir) + "/gradient_37x23.png");
  const std::string jpeg = Jpeg(40, 24, false);
  auto message = [](absl::string_view bytes, ImageLimits limits = {}) {
    auto r = DecodeImage(bytes, limits);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_NE(message(png.substr(0, png.size() / 2)).find("the PNG image cannot be decoded"), std::string::npos);
  EXPECT_NE(message(jpeg.substr(0, 200)).find("the JPEG image cannot be decoded"), std::string::npos);
  EXPECT_NE(message("GIF89a....").find("neither PNG, JPEG nor WebP"), std::string::npos);
  EXPECT_NE(message("RIFF0000WEBPVP8 ").find("the WebP image cannot be decoded: its header is malformed or truncated"),
            std::string::npos);
  ImageLimits small;
  small.max_pixels = 100;
  EXPECT_NE(message(png, small).find("the PNG image is 37 x 23 pixels; at most 100 pixels are taken"),
            std::string::npos);
  EXPECT_NE(message(jpeg, small).find("the JPEG image is 40 x 24 pixels"), std::string::npos);
  small.max_bytes = 10;
  EXPECT_NE(message(png, small).find("at most 10 are taken"), std::string::npos);
}

// WebP (lossless, lossy, with alpha) and JPEGs with each EXIF orientation
// (tests/golden/make_image_formats_golden.py) decode to the RGB
// transformers' processors see: Pillow's decoding, PIL.ImageOps.
// exif_transpose (transformers' load_image) and convert_to_rgb (alpha onto
// white). Lossy WebP's pixels are measured against Pillow's; the rest are
// equal. An animated, truncated or oversized WebP is refused by name.
TEST(DecodeImageTest, WebPAndExifOrientationAsTransformersSeesThem) {
  constexpr char kFormats[] = "tests/golden/image_formats";
  const std::string golden = std::string(kFormats) + "/golden.safetensors";
  std::ifstream in(std::string(kFormats) + "/golden.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& [name, f] : meta["files"].items()) {
    if (!f.contains("width")) continue;
    auto image = DecodeImage(Read(std::string(kFormats) + "/" + name));
    ASSERT_TRUE(image.ok()) << name << ": " << image.status();
    EXPECT_EQ(image->width, f["width"].get<int>()) << name;
    EXPECT_EQ(image->height, f["height"].get<int>()) << name;
    std::string dtype;
    const std::string want = testing::RawGoldenTensor(golden, name + ".rgb", &dtype);
    ASSERT_EQ(want.size(), image->pixels.size()) << name;
    int worst = 0;
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int d = std::abs(int{image->pixels[i]} - int{static_cast<uint8_t>(want[i])});
      worst = std::max(worst, d);
      differ += d != 0;
    }
    EXPECT_EQ(differ, 0u) << name << ": " << differ << " of " << want.size() << " values differ from Pillow's, by "
                          << worst << " at most";
    ++checked;
  }
  EXPECT_EQ(checked, 10);
  auto message = [](absl::string_view bytes, ImageLimits limits = {}) {
    auto r = DecodeImage(bytes, limits);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_NE(message(Read(std::string(kFormats) + "/animated.webp")).find("animated WebP images are not supported"),
            std::string::npos);
  const std::string lossy = Read(std::string(kFormats) + "/lossy.webp");
  EXPECT_NE(message(lossy.substr(0, lossy.size() - 100)).find("the WebP image cannot be decoded"), std::string::npos);
  ImageLimits small;
  small.max_pixels = 100;
  EXPECT_NE(message(lossy, small).find("the WebP image is 52 x 36 pixels; at most 100 pixels are taken"),
            std::string::npos);
}

// Real photographs (scikit-image's public-domain and CC0 samples, cropped
// to odd sizes; tests/golden/make_photo_golden.py): a baseline 4:4:4 JPEG,
// a progressive 4:2:0 one and an RGBA PNG decode to the RGB transformers'
// processors see, and each of the three processors (the tiny fixtures'
// settings) makes transformers' pixels; every value is compared, and the
// differences, if any, counted.
TEST(RealPhotographTest, DecodersAndProcessorsMatchTransformers) {
  constexpr char kPhotos[] = "tests/golden/photos";
  const std::string golden = std::string(kPhotos) + "/golden.safetensors";
  auto file = SafetensorsFile::Open(golden);
  ASSERT_TRUE(file.ok()) << file.status();
  std::ifstream in(std::string(kPhotos) + "/golden.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  auto idefics3 = LoadIdefics3ProcessorConfig(kDir);
  auto qwen = LoadQwen2VlProcessorConfig("tests/golden/qwen3vl_tiny");
  auto gemma = LoadGemma3ProcessorConfig("tests/golden/gemma3vl_tiny");
  ASSERT_TRUE(idefics3.ok() && qwen.ok() && gemma.ok());
  int cases = 0;
  for (const auto& [name, im] : meta["images"].items()) {
    auto image = DecodeImage(Read(std::string(kPhotos) + "/" + im["file"].get<std::string>()));
    ASSERT_TRUE(image.ok()) << name << ": " << image.status();
    std::string dtype;
    EXPECT_EQ(std::string(image->pixels.begin(), image->pixels.end()),
              testing::RawGoldenTensor(golden, name + ".rgb", &dtype))
        << name << ": decoded as transformers sees it";
    for (const std::string processor : {"idefics3", "qwen3vl", "gemma3"}) {
      const std::string tensor = name + "." + processor + ".pixel_values";
      const TensorInfo* t = file->Find(tensor);
      ASSERT_NE(t, nullptr) << tensor;
      auto want = file->ReadFloat(tensor, t->shape);
      ASSERT_TRUE(want.ok()) << want.status();
      std::vector<float> got;
      if (processor == "idefics3") {
        got = ProcessIdefics3Image(*image, *idefics3).pixels;
      } else if (processor == "qwen3vl") {
        auto q = ProcessQwen2VlImage(*image, *qwen);
        ASSERT_TRUE(q.ok()) << q.status();
        got = q->patches;
      } else {
        got = ProcessGemma3Image(*image, *gemma).pixels;
      }
      EXPECT_EQ(Differing(got, *want), 0u) << tensor << ": values that differ from transformers' ("
                                              << got.size() << " made, " << want->size() << " expected)";
      ++cases;
    }
  }
  EXPECT_EQ(cases, 9);
}

// Qwen3-VL's processor (transformers' Qwen2VLImageProcessorPil) on the
// fixture's images: downscaled past max_pixels, upscaled to min_pixels, an
// odd size rounded, a JPEG whose halves round to even. The decoded RGB,
// the resized pixels and every patch value bit for bit, the grid, and the
// expanded prompt text; and an aspect ratio past 200 refused by name.
TEST(Qwen2VlProcessorTest, PixelsGridsAndPromptTextMatchTransformers) {
  constexpr char kQwen[] = "tests/golden/qwen3vl_tiny";
  const std::string golden = std::string(kQwen) + "/golden.safetensors";
  auto config = LoadQwen2VlProcessorConfig(kQwen);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->min_pixels, 384);
  EXPECT_EQ(config->max_pixels, 3072);
  EXPECT_EQ(config->patch, 4);
  std::ifstream in(std::string(kQwen) + "/golden.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  auto file = SafetensorsFile::Open(golden);
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, std::string> texts;
  for (const auto& [name, im] : meta["images"].items()) {
    auto image = DecodeImage(Read(absl::StrCat(kQwen, "/", im["file"].get<std::string>())));
    ASSERT_TRUE(image.ok()) << image.status();
    std::string dtype;
    const std::string rgb = testing::RawGoldenTensor(golden, "img." + name + ".rgb", &dtype);
    EXPECT_EQ(dtype, "U8");
    EXPECT_EQ(std::string(image->pixels.begin(), image->pixels.end()), rgb) << name << ": decoded as Pillow decodes";
    auto p = ProcessQwen2VlImage(*image, *config);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->resized.height, im["resized_height"].get<int>()) << name;
    EXPECT_EQ(p->resized.width, im["resized_width"].get<int>()) << name;
    const std::string resized = testing::RawGoldenTensor(golden, "img." + name + ".resized", &dtype);
    EXPECT_EQ(std::string(p->resized.pixels.begin(), p->resized.pixels.end()), resized) << name << ": Pillow's bicubic";
    const std::vector<int> grid = im["image_grid_thw"].get<std::vector<int>>();
    EXPECT_EQ(p->grid_h, grid[1]) << name;
    EXPECT_EQ(p->grid_w, grid[2]) << name;
    const TensorInfo* t = file->Find("img." + name + ".pixel_values");
    ASSERT_NE(t, nullptr);
    auto want = file->ReadFloat("img." + name + ".pixel_values", t->shape);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(p->patches, *want) << name << ": every patch value, bit for bit";
    texts[name] = p->text;
  }
  // The chats' prompts with each <|image_pad|> expanded as the processor does.
  for (const auto& [name, c] : meta["cases"].items()) {
    std::string prompt = c["prompt"];
    size_t at = 0;
    for (const auto& image : c["images"]) {
      at = prompt.find("<|image_pad|>", at);
      ASSERT_NE(at, std::string::npos);
      const std::string& text = texts[image.get<std::string>()];
      prompt.replace(at, 13, text);
      at += text.size();
    }
    EXPECT_EQ(prompt, c["expanded_prompt"].get<std::string>()) << name;
  }
  // smart_resize as transformers': a side below one block grows to the
  // minimum area; an aspect ratio past 200 is refused, naming it.
  auto tiny = SmartResize(3, 5, 8, 384, 3072);
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(*tiny, (std::pair<int, int>(16, 32)));
  auto thin = SmartResize(1, 201, 8, 384, 3072);
  EXPECT_EQ(thin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(thin.status().message().find("aspect ratio is 201"), std::string::npos) << thin.status();
}

// Gemma 3's processor (Gemma3ImageProcessorPil: Pillow's bilinear to the
// tower's 32 px, then (u8 / 255 - 0.5) / 0.5) on two PNGs and a JPEG: every
// pixel bit for bit, and the prompts with each <start_of_image> expanded
// as Gemma3Processor does. Pan-and-scan is refused by name.
TEST(Gemma3ProcessorTest, PixelsAndPromptTextMatchTransformers) {
  constexpr char kGemma[] = "tests/golden/gemma3vl_tiny";
  auto config = LoadGemma3ProcessorConfig(kGemma);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->size, 32);
  EXPECT_EQ(config->image_seq_length, 16);
  auto golden = SafetensorsFile::Open(std::string(kGemma) + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  std::ifstream in(std::string(kGemma) + "/golden.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  for (const std::string c : {"gradient", "photo", "two_images"}) {
    const auto& cm = meta["cases"][c];
    std::vector<float> pixels;
    std::string prompt = cm["prompt"];
    size_t at = 0;
    for (const auto& name : cm["images"]) {
      auto image = DecodeImage(Read(absl::StrCat(kGemma, "/", meta["images"][name.get<std::string>()]["file"].get<std::string>())));
      ASSERT_TRUE(image.ok()) << image.status();
      const Gemma3Image p = ProcessGemma3Image(*image, *config);
      pixels.insert(pixels.end(), p.pixels.begin(), p.pixels.end());
      at = prompt.find("<start_of_image>", at);
      ASSERT_NE(at, std::string::npos);
      prompt.replace(at, 16, p.text);
      at += p.text.size();
    }
    EXPECT_EQ(prompt, cm["expanded_prompt"].get<std::string>()) << c;
    const TensorInfo* t = golden->Find(c + ".pixel_values");
    ASSERT_NE(t, nullptr);
    auto want = golden->ReadFloat(c + ".pixel_values", t->shape);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(pixels.size(), want->size()) << c;
    EXPECT_EQ(Differing(pixels, *want), 0u) << c << ": pixels that differ from transformers' processor";
  }
  // Pan-and-scan (the fixture's case asks for it per call, its minimum
  // crop lowered to 8 px): the 37 x 23 gradient and its two 19 x 23 crops,
  // three tiles, and the processor's sentence around them.
  const auto& pan = meta["cases"]["pan_and_scan"];
  const std::string dir = ::testing::TempDir() + "/gemma3_pan_and_scan";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/preprocessor_config.json")
      << R"({"size": {"height": 32, "width": 32}, "resample": 2, "do_pan_and_scan": true,
            "pan_and_scan_min_crop_size": )" << pan["processor_kwargs"]["pan_and_scan_min_crop_size"].get<int>()
      << R"(, "pan_and_scan_max_num_crops": 4, "pan_and_scan_min_ratio_to_activate": 1.2, "image_seq_length": 16})";
  auto pan_config = LoadGemma3ProcessorConfig(dir);
  ASSERT_TRUE(pan_config.ok()) << pan_config.status();
  EXPECT_TRUE(pan_config->pan_and_scan);
  auto gradient = DecodeImage(Read(std::string(kGemma) + "/gradient_37x23.png"));
  ASSERT_TRUE(gradient.ok());
  const Gemma3Image panned = ProcessGemma3Image(*gradient, *pan_config);
  EXPECT_EQ(panned.tiles, 1 + pan["num_crops"][0].get<int>());
  std::string prompt = pan["prompt"];
  prompt.replace(prompt.find("<start_of_image>"), 16, panned.text);
  EXPECT_EQ(prompt, pan["expanded_prompt"].get<std::string>());
  auto want = golden->ReadFloat("pan_and_scan.pixel_values", golden->Find("pan_and_scan.pixel_values")->shape);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(Differing(panned.pixels, *want), 0u) << "pan-and-scan pixels that differ from transformers' processor";
  // An image too square for it, or crops below the minimum, stays one tile.
  EXPECT_TRUE(PanAndScanCrops(30, 28, *pan_config).empty());
  Gemma3ProcessorConfig big = *pan_config;
  big.min_crop_size = 20;
  EXPECT_TRUE(PanAndScanCrops(37, 23, big).empty());
  EXPECT_EQ(PanAndScanCrops(23, 37, *pan_config).size(), 2u);  // tall: crops down the image
  // The released files: image_seq_length in preprocessor_config.json, the
  // pan-and-scan keys null.
  std::ofstream(dir + "/preprocessor_config.json")
      << R"({"do_pan_and_scan": null, "image_seq_length": 64, "size": {"height": 448, "width": 448}, "resample": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "rescale_factor": 0.00392156862745098})";
  auto released = LoadGemma3ProcessorConfig(dir);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->image_seq_length, 64);
  EXPECT_EQ(released->size, 448);
}

}  // namespace
}  // namespace flover
