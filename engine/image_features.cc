#include "engine/image_features.h"

#include <algorithm>
#include <utility>

namespace flover {

ImageFeatureCache::Rows ImageFeatureCache::Find(uint64_t key) {
  auto it = kept_.find(key);
  if (it == kept_.end()) return nullptr;
  it->second.last_use = ++uses_;
  return it->second.rows;
}

void ImageFeatureCache::Keep(uint64_t key, Rows rows) {
  const int64_t bytes = BytesOf(rows);
  if (bytes > budget_) return;
  Kept& slot = kept_[key];
  if (slot.rows != nullptr) bytes_ -= BytesOf(slot.rows);  // the same image encoded twice at once
  slot = {std::move(rows), ++uses_};
  bytes_ += bytes;
  while (bytes_ > budget_) {
    auto oldest = std::min_element(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    bytes_ -= BytesOf(oldest->second.rows);
    kept_.erase(oldest);
  }
}

std::vector<GivenPromptRows> ImageGivenRows(const std::vector<int32_t>& prompt, const std::vector<PromptImage>& images,
                                            const std::vector<ImageFeatureCache::Rows>& features, int32_t image_token,
                                            int rows_per_tile, int width) {
  std::vector<GivenPromptRows> spans;
  const size_t per_tile = static_cast<size_t>(rows_per_tile) * width;
  size_t at = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    for (int t = 0; t < images[i].num_tiles; ++t) {
      const float* rows = features[i]->data() + t * per_tile;
      int taken = 0;
      while (taken < rows_per_tile) {
        while (prompt[at] != image_token) ++at;
        size_t end = at;
        while (end < prompt.size() && prompt[end] == image_token && taken + static_cast<int>(end - at) < rows_per_tile) {
          ++end;
        }
        const int count = static_cast<int>(end - at);
        auto values = std::make_shared<const std::vector<float>>(rows + static_cast<size_t>(taken) * width,
                                                                 rows + static_cast<size_t>(taken + count) * width);
        const uint64_t key = images[i].key ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(t + 1)) ^
                             (static_cast<uint64_t>(taken) << 48);
        spans.push_back({static_cast<int32_t>(at), count, std::move(values), key});
        taken += count;
        at = end;
      }
    }
  }
  return spans;
}

}  // namespace flover
