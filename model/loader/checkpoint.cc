#include "model/loader/checkpoint.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/file_util.h"
#include "util/json.h"

namespace flover {

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint c;
  c.name_ = dir;
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!FileExists(index_path)) {
    auto file = SafetensorsFile::Open(single);
    if (!file.ok()) return file.status();
    c.files_.push_back(std::move(*file));
    for (const auto& [name, info] : c.files_[0].tensors()) c.file_of_[name] = 0;
    return c;
  }
  auto bad = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(index_path, ": ", m...)); };
  auto text = ReadFile(index_path);
  if (!text.ok()) return text.status();
  auto index = ParseJsonObject(*text, index_path);
  if (!index.ok()) return index.status();
  auto map = index->fields().find("weight_map");
  if (map == index->fields().end() || !map->second.has_struct_value()) {
    return bad("no \"weight_map\" object");
  }
  std::map<std::string, int> shard_index;  // file name -> index in files_
  for (const auto& [tensor, file] : map->second.struct_value().fields()) {
    if (!file.has_string_value()) return bad("tensor '", tensor, "' maps to a non-string");
    const std::string& shard = file.string_value();
    if (shard.empty() || absl::StrContains(shard, "/") || shard == "." || shard == "..") {
      return bad("tensor '", tensor, "' maps to \"", shard, "\", not a file in the directory");
    }
    auto [it, added] = shard_index.emplace(shard, static_cast<int>(c.files_.size()));
    if (added) {
      auto opened = SafetensorsFile::Open(dir + "/" + shard);
      if (!opened.ok()) return opened.status();
      c.files_.push_back(std::move(*opened));
    }
    if (c.files_[it->second].Find(tensor) == nullptr) {
      return bad("tensor '", tensor, "' is not in ", shard, ", where the index puts it");
    }
    c.file_of_[tensor] = it->second;
  }
  if (c.files_.empty()) return bad("the index names no tensors");
  for (const auto& [shard, i] : shard_index) {
    for (const auto& [tensor, info] : c.files_[i].tensors()) {
      auto it = c.file_of_.find(tensor);
      if (it == c.file_of_.end()) return bad("tensor '", tensor, "' of ", shard, " is not in the index");
      if (it->second != i) {
        return bad("tensor '", tensor, "' is in ", shard, " but the index puts it elsewhere");
      }
    }
  }
  return c;
}

const TensorInfo* Checkpoint::Find(absl::string_view tensor) const {
  auto it = file_of_.find(tensor);
  return it == file_of_.end() ? nullptr : files_[it->second].Find(tensor);
}

absl::StatusOr<const SafetensorsFile*> Checkpoint::FileOf(absl::string_view tensor) const {
  auto it = file_of_.find(tensor);
  if (it == file_of_.end()) {
    return absl::NotFoundError(absl::StrCat(name_, ": no tensor '", tensor, "'"));
  }
  return &files_[it->second];
}

absl::StatusOr<std::vector<float>> Checkpoint::ReadFloat(
    absl::string_view tensor, const std::vector<int64_t>& expected_shape) const {
  auto file = FileOf(tensor);
  if (!file.ok()) return file.status();
  return (*file)->ReadFloat(tensor, expected_shape);
}

absl::StatusOr<std::vector<float>> Checkpoint::ReadFloatRegion(
    absl::string_view tensor, const std::vector<int64_t>& expected_shape,
    const TensorRegion& region) const {
  auto file = FileOf(tensor);
  if (!file.ok()) return file.status();
  return (*file)->ReadFloatRegion(tensor, expected_shape, region);
}

absl::StatusOr<std::vector<uint8_t>> Checkpoint::ReadBytesRegion(absl::string_view tensor,
                                                                 const std::vector<int64_t>& expected_shape,
                                                                 const TensorRegion& region) const {
  auto file = FileOf(tensor);
  if (!file.ok()) return file.status();
  return (*file)->ReadBytesRegion(tensor, expected_shape, region);
}

absl::StatusOr<StoredValues> Checkpoint::ReadRegion(absl::string_view tensor,
                                                    const std::vector<int64_t>& expected_shape,
                                                    const TensorRegion& region) const {
  auto file = FileOf(tensor);
  if (!file.ok()) return file.status();
  return (*file)->ReadRegion(tensor, expected_shape, region);
}

}  // namespace flover
