#include "model/decoder/decoder_weights.h"

#include <algorithm>

namespace flover {
namespace {

void ForEach(const DecoderSpec& model, const DecoderRecipes& recipes, const ShardSpec& spec,
             const WeightPart& part, DecoderWeights& w, const DecoderRecipes::Visit& visit) {
  const DecoderShard shard = DecoderShardOf(model, spec);
  const int first = part.layer_begin, last = part.layer_end < 0 ? model.n_layer : part.layer_end;
  w.layers.resize(std::max(0, last - first));
  for (int l = first; l < last; ++l) recipes.layer(l, shard, w.layers[l - first], visit);
  if (!part.globals) return;
  if (part.embedding) visit(recipes.embedding(shard), &w.embed);
  recipes.globals(shard, w, visit);
  // The per-layer table is read apart (UploadColumnBands); only checked here.
  if (part.embedding && recipes.per_layer_table) visit(recipes.per_layer_table(), ParamDest());
}

}  // namespace

absl::StatusOr<DecoderWeights> LoadDecoderWeights(const WeightSource& source,
                                                  const DecoderSpec& model,
                                                  const DecoderRecipes& recipes,
                                                  const ShardSpec& spec, WeightPart part) {
  if (absl::Status st = ValidateDecoderShard(model, spec); !st.ok()) return st;
  if (absl::Status st = CheckWeightPart(part, model.n_layer); !st.ok()) return st;
  DecoderWeights w;
  absl::Status st;
  ForEach(model, recipes, spec, part, w, [&](const WeightRecipe& r, ParamDest out) {
    if (st.ok()) st = ReadInto(source, r, out, part.keep_blocks);
  });
  if (!st.ok()) return st;
  return w;
}

absl::Status CheckDecoderWeights(const WeightSource& source, const DecoderSpec& model,
                                 const DecoderRecipes& recipes) {
  absl::Status st;
  DecoderWeights unused;
  ForEach(model, recipes, ShardSpec{1, 0}, WeightPart{}, unused,
          [&](const WeightRecipe& r, ParamDest) {
            for (const WeightBlock& b : r.blocks) {
              if (st.ok()) st = source.Read(b.tensor, b.shape, TensorRegion{}).status();
            }
          });
  return st;
}

WeightRecipe FusedRows(const std::string& tensor, const std::vector<int64_t>& sizes, int64_t cols,
                       const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<WeightRecipe> parts;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    parts.push_back(RowSlice(tensor, {total, cols}, offset + ranges[i].first,
                             offset + ranges[i].second));
    offset += sizes[i];
  }
  return Stack(WeightRecipe::kRows, std::move(parts));
}

}  // namespace flover
