// What transformers' image processors share: where a checkpoint keeps the
// processor's settings, the rescale-and-normalise step and its settings.
#ifndef FLOVER_MODEL_VISION_PROCESSOR_SETTINGS_H_
#define FLOVER_MODEL_VISION_PROCESSOR_SETTINGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace flover {

struct ProcessorSettings {
  // preprocessor_config.json, or else processor_config.json's
  // "image_processor"; has_image false where the checkpoint has neither
  // (the processor's defaults).
  google::protobuf::Struct image;
  bool has_image = false;
  std::string what;  // the file `image` came from
  // processor_config.json (empty where absent) and its path.
  google::protobuf::Struct processor;
  std::string processor_path;
  bool has_processor = false;
};

absl::StatusOr<ProcessorSettings> ReadProcessorSettings(const std::string& dir);

// The rescale and normalisation: a rescale_factor of 1/255, do_resize,
// do_rescale, do_normalize and do_convert_rgb not false (InvalidArgument
// otherwise), image_mean and image_std (3 each; std positive) into `mean`
// and `std` where given.
absl::Status ReadNormalization(const google::protobuf::Struct& image, const std::string& what, float mean[3],
                               float std[3]);

// A pixel as the processors compute it in float32: (u8 / 255 - mean) / std.
inline float NormalizePixel(uint8_t v, float mean, float std) {
  const float scaled = static_cast<float>(v * (1.0 / 255));
  return (scaled - mean) / std;
}

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_PROCESSOR_SETTINGS_H_
