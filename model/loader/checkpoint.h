// A checkpoint directory's weights as Hugging Face saves them: one
// model.safetensors, or shards named by model.safetensors.index.json. Every
// file is untrusted: the index must name files in the directory only, every
// tensor it lists must be in the shard it names, every tensor of a shard
// must be in the index, and no tensor may be in two shards.
#ifndef FLOVER_MODEL_LOADER_CHECKPOINT_H_
#define FLOVER_MODEL_LOADER_CHECKPOINT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/loader/safetensors.h"

namespace flover {

class Checkpoint {
 public:
  static absl::StatusOr<Checkpoint> Open(const std::string& dir);

  // The tensor, or null.
  const TensorInfo* Find(absl::string_view tensor) const;
  // As SafetensorsFile::ReadFloat, from whichever shard holds the tensor;
  // NotFound naming the tensor and the checkpoint when none does.
  absl::StatusOr<std::vector<float>> ReadFloat(absl::string_view tensor,
                                               const std::vector<int64_t>& expected_shape) const;
  absl::StatusOr<std::vector<float>> ReadFloatRegion(absl::string_view tensor,
                                                     const std::vector<int64_t>& expected_shape,
                                                     const TensorRegion& region) const;
  // As SafetensorsFile::ReadRegion (the stored dtype).
  absl::StatusOr<StoredValues> ReadRegion(absl::string_view tensor,
                                          const std::vector<int64_t>& expected_shape,
                                          const TensorRegion& region) const;
  // As SafetensorsFile::ReadBytesRegion (a U8 tensor's bytes).
  absl::StatusOr<std::vector<uint8_t>> ReadBytesRegion(absl::string_view tensor,
                                                       const std::vector<int64_t>& expected_shape,
                                                       const TensorRegion& region) const;
  int num_files() const { return static_cast<int>(files_.size()); }
  const std::string& name() const { return name_; }

 private:
  // The shard that holds `tensor`; NotFound naming both when none does.
  absl::StatusOr<const SafetensorsFile*> FileOf(absl::string_view tensor) const;
  std::string name_;  // the directory
  std::vector<SafetensorsFile> files_;
  std::map<std::string, int, std::less<>> file_of_;  // tensor -> index in files_
};

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_CHECKPOINT_H_
