// Arbitrary bytes as a .safetensors file: the parser must refuse what is
// malformed with a status, and every tensor it accepts must be readable
// whole and by region, as float32 and in its stored dtype, without reading
// outside the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = flover::SafetensorsFile::Parse(
      std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  if (!file.ok()) return 0;
  for (const auto& [name, info] : file->tensors()) {
    (void)file->ReadFloat(name, info.shape);
    (void)file->ReadFloat(name, {info.numel() + 1});  // a wrong shape is an error
    flover::TensorRegion region = info.All();
    region.row_begin = region.rows() / 2;
    region.col_end = region.col_begin + (region.cols() + 1) / 2;
    (void)file->ReadFloatRegion(name, info.shape, region);
    (void)file->ReadRegion(name, info.shape, region);  // the stored dtype
    region.row_end += 1;  // one row past the end: an error, not a read
    (void)file->ReadFloatRegion(name, info.shape, region);
    (void)file->ReadRegion(name, info.shape, region);
  }
  return 0;
}
