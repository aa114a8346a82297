// How an embedding model turns a sequence's final hidden rows (after the
// model's final norm: CausalLm::FinalHidden) into one vector: the last row
// (Qwen3-Embedding, gte-Qwen2), the mean of the rows, or the first (CLS);
// then L2-normalised where the model asks. Read from a sentence-transformers
// directory's modules.json and its Pooling module's config, or from a GGUF
// file's <arch>.pooling_type, or named (--pooling).
#ifndef FLOVER_MODEL_POOLING_H_
#define FLOVER_MODEL_POOLING_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace flover {

struct Pooling {
  enum class Kind { kLast, kMean, kCls };
  Kind kind = Kind::kLast;
  bool normalize = true;
};

// "last", "mean", "cls"; InvalidArgument naming the choices.
absl::StatusOr<Pooling::Kind> PoolingKindNamed(absl::string_view name);
const char* PoolingKindName(Pooling::Kind kind);

// A sentence-transformers directory's pooling: modules.json's Pooling
// module (its config's pooling_mode_lasttoken / _mean_tokens / _cls_token,
// exactly one set) and whether a Normalize module follows. nullopt where
// the directory has no modules.json; InvalidArgument for a pooling Flover
// does not run (max, weighted mean), naming it.
absl::StatusOr<std::optional<Pooling>> ReadDirectoryPooling(const std::string& dir);

// llama.cpp's pooling_type (1 mean, 2 cls, 3 last; 0 none, 4 rank and
// others: nullopt), normalised as llama.cpp's embeddings are.
std::optional<Pooling> PoolingFromGguf(int64_t pooling_type);

// A sequence's rows pooled as they come, in order of position, a chunk at a
// time (the engine's steps): the mean's running sum in double (the same
// additions in the same order as Pool's), or the one row CLS or last-token
// pooling keeps; never every row. Finish gives what Pool gives.
class PoolingSum {
 public:
  PoolingSum(const Pooling& pooling, int C) : pooling_(pooling), sum_(C, 0.0) {}
  // Rows [position, position + n) of a sequence of T positions ([n, C]).
  void Add(absl::Span<const float> rows, int position, int n, int T);
  absl::StatusOr<std::vector<float>> Finish(int dims) const;
  int rows() const { return rows_; }

 private:
  Pooling pooling_;
  std::vector<double> sum_;
  int rows_ = 0;  // rows added (the mean's), or 1 once the kept row came
};

// One sequence's embedding from its rows ([T, C], in order of position),
// its first `dims` values (0: all; Matryoshka models) renormalised where
// the pooling normalises. Sums in double, in row order: the same bits for
// the same rows. InvalidArgument for no rows or dims out of [0, C].
absl::StatusOr<std::vector<float>> Pool(absl::Span<const float> rows, int T, int C, const Pooling& pooling,
                                        int dims = 0);

}  // namespace flover

#endif  // FLOVER_MODEL_POOLING_H_
