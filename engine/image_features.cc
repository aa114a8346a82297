#include "engine/image_features.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

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
                                            const std::vector<ImageFeatureCache::Rows>& features,
                                            const std::vector<int>& rows_of, const ImageEncoderInfo& info) {
  std::vector<GivenPromptRows> spans;
  const size_t width = static_cast<size_t>(info.out_width);
  size_t at = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const int per_unit = rows_of[i] / images[i].num_tiles;
    const float* all = features[i]->data();
    const size_t layer_stride = static_cast<size_t>(rows_of[i]) * width;  // an addition's block
    for (int t = 0; t < images[i].num_tiles; ++t) {
      const size_t unit = static_cast<size_t>(t) * per_unit;
      int taken = 0;
      while (taken < per_unit) {
        while (prompt[at] != info.image_token) ++at;
        size_t end = at;
        while (end < prompt.size() && prompt[end] == info.image_token &&
               taken + static_cast<int>(end - at) < per_unit) {
          ++end;
        }
        const int count = static_cast<int>(end - at);
        std::vector<float> values;
        values.reserve(static_cast<size_t>(1 + info.given_layers) * count * width);
        for (int l = 0; l <= info.given_layers; ++l) {
          const float* rows = all + l * layer_stride + (unit + taken) * width;
          values.insert(values.end(), rows, rows + count * width);
        }
        const uint64_t key = images[i].key ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(t + 1)) ^
                             (static_cast<uint64_t>(taken) << 48);
        GivenPromptRows span{static_cast<int32_t>(at), count, std::make_shared<const std::vector<float>>(std::move(values)),
                             key, info.given_layers};
        span.whole = info.bidirectional;  // one run an image, then (CheckImageRuns)
        if (info.grid_positions) {  // the image's whole grid, in one run (CheckImageRuns)
          span.grid_h = images[i].grid_h / info.merge;
          span.grid_w = images[i].grid_w / info.merge;
        }
        spans.push_back(std::move(span));
        taken += count;
        at = end;
      }
    }
  }
  return spans;
}

absl::Status CheckImageRuns(const std::vector<int32_t>& prompt, const std::vector<int>& rows_of, int32_t image_token) {
  size_t image = 0;
  for (size_t i = 0; i < prompt.size();) {
    if (prompt[i] != image_token) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < prompt.size() && prompt[end] == image_token) ++end;
    if (image >= rows_of.size() || static_cast<int>(end - i) != rows_of[image]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the prompt's run of ", end - i, " image tokens (id ", image_token, ") at index ", i, " is not image ",
          image, "'s ", image < rows_of.size() ? absl::StrCat(rows_of[image]) : std::string("(none)"),
          " rows: each image's tokens stand together, in order"));
    }
    ++image;
    i = end;
  }
  if (image != rows_of.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has runs of image tokens for ", image, " of ",
                                                   rows_of.size(), " images"));
  }
  return absl::OkStatus();
}

MropeRow MropePosition(const std::vector<GivenPromptRows>& spans, int64_t index) {
  int64_t shift = 0;  // what the images before `index` saved: rows less positions
  for (const GivenPromptRows& g : spans) {
    if (g.grid_h <= 0) continue;
    if (index < g.position) break;
    const int64_t start = g.position - shift;
    if (index < int64_t{g.position} + g.count) {
      const int64_t k = index - g.position;
      return {static_cast<int32_t>(start), static_cast<int32_t>(start + k / g.grid_w),
              static_cast<int32_t>(start + k % g.grid_w)};
    }
    shift += g.count - std::max(g.grid_h, g.grid_w);
  }
  const auto at = static_cast<int32_t>(index - shift);
  return {at, at, at};
}

}  // namespace flover
