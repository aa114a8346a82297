// Host-side helpers shared by the model families: slicing row-major weight
// matrices into tensor-parallel shards, and the fixed-seed initialisation of
// built-in (random-weight) models.
#ifndef FLOVER_MODEL_HOST_MATRIX_H_
#define FLOVER_MODEL_HOST_MATRIX_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "util/split_mix64.h"

namespace flover {

// Rows [r0, r1) of a row-major [*, cols] matrix, appended to `out`.
inline void AppendRows(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t r1,
                       std::vector<float>* out) {
  out->insert(out->end(), m.begin() + r0 * cols, m.begin() + r1 * cols);
}

// Columns [c0, c1) of a row-major [rows, cols] matrix.
inline std::vector<float> Cols(const std::vector<float>& m, int64_t rows, int64_t cols,
                               int64_t c0, int64_t c1) {
  std::vector<float> out;
  out.reserve(rows * (c1 - c0));
  for (int64_t r = 0; r < rows; ++r) {
    out.insert(out.end(), m.begin() + r * cols + c0, m.begin() + r * cols + c1);
  }
  return out;
}

// n values uniform on [-a, a] with a = 0.02 * sqrt(3), i.e. std 0.02: the
// scale GPT-2 and Llama initialise with, so built-in models' activations stay
// in the range real checkpoints produce.
inline std::vector<float> RandomInit(int64_t n, SplitMix64& rng) {
  const float a = 0.02f * std::sqrt(3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = a * rng.NextSigned();
  return v;
}

}  // namespace flover

#endif  // FLOVER_MODEL_HOST_MATRIX_H_
