// Linear layers on weights kept in GGUF's quantized blocks (--dtype=native;
// kernels/block_format.h): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K,
// read where they lie, with AVX-512 VNNI.
//
// Prepare repacks a weight's blocks once, at load: columns in pairs, each
// pair's codes of 64 values laid out so that one load and a mask give both
// columns' codes of a 32-value block, and each group of 256 values' scales
// (f16, or the K-quants' small integers and f16 super-block scales) in one
// header, converted 16 at a time. The values and their bytes are the file's
// (Q4_K, Q5_K: 4 bytes more per 256 values, 6-bit scales unpacked to 8).
//
// The arithmetic, per output (row m, column n), for every row count:
//   - the input row is quantized per 32 values, as ggml's Q8_0 does (per 256
//     for the K-quants Q4_K, Q5_K, Q6_K, as its Q8_K does):
//     d_x = max|x| / 127, q_x = round(x / d_x) (to nearest even), s_x = sum q_x;
//   - per 32-value block, one u8 x s8 dot product (vpdpbusd) sums the
//     weight's integer codes times q_x exactly in int32, 8 lanes of 4
//     products; a format's code offset (8 for Q4_0, 16 for Q5_0, 32 for
//     Q6_K, 128 for Q8_0, whose s8 codes are biased to u8) is taken out of
//     the integer sum exactly;
//   - each lane's int32 becomes float32 and is added into the column's float
//     lane as float(dot) * (w_scale * d_x), w_scale being the scale of the
//     lane's sub-block as ggml's dequantization computes it (d * sc in
//     float32); per 256 values, first (for the formats with a minimum: Q4_1,
//     Q5_1, Q4_K, Q5_K) one lane per 32-value block adds w_min * (d_x * s_x)
//     (w_min = m, or -dmin * m in float32 as ggml), then the blocks in order;
//     the K-quants add float(dot) * w_scale and w_min * s_x, in units of the
//     group's d_x: the sums are multiplied by the last group's d_x over this
//     one's when a group starts (a group of zeros keeps the last d_x), and by
//     the last group's d_x at the end;
//   - the column's 8 lanes are added in one fixed order, then the bias, gelu
//     or the residual.
// Tiles are 8 rows x 4 columns (two pairs). Nothing in the arithmetic
// depends on M, on the tile, pair or half a column falls in or on the thread
// that runs it, so a row's result is bitwise the same at any batch size.
//
// The error against the dequantized weights times the float32 input is the
// input's rounding: at most |w| . (d_x / 2) summed over the row, plus float32
// sums (block_linear_test derives its tolerance from exactly that).
#ifndef FLOVER_KERNELS_CPU_BLOCK_LINEAR_H_
#define FLOVER_KERNELS_CPU_BLOCK_LINEAR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/block_format.h"
#include "kernels/cpu/weight_arena.h"

namespace flover::kernels {

class BlockLinear {
 public:
  // OK where this CPU runs the kernels (AVX-512 F/BW/VL with VNNI, F16C);
  // FailedPrecondition naming what is missing otherwise.
  static absl::Status CheckSupported();

  // InvalidArgument unless w is blocks of [N, K] (kOutIn) whose spans cover N
  // rows and K is a whole number of 64 values (256 for the K-quants).
  static absl::Status CheckShape(const HostValues& w, int K, int N, WeightLayout layout);

  // Copies the blocks as they are (the weight's bytes are the file's).
  absl::StatusOr<std::unique_ptr<Weight>> Prepare(HostValues w, int K, int N, WeightLayout layout);
  // Whether w came from Prepare.
  static bool Holds(const Weight& w);
  // out[M, N] = epilogue(x[M, K] @ W^T + bias).
  void Run(const float* x, int M, const Weight& w, const float* bias, Epilogue epilogue, float* out);

  // One input chunk of 64 values (blocks a and b) as Run quantizes it
  // (public for tests).
  struct alignas(64) XChunk {
    int8_t a[64];        // block a's 32 codes, twice (once per column of a pair)
    int8_t b[64];        // block b's, twice
    int32_t neg_a[16];   // -(each lane's 4 codes of a summed)
    int32_t neg_b[16];
    float dx[2];         // d_x of a and b
    // Scales of 256 values only: the group's d_x, or the last nonzero one
    // before it (1 before any); and the previous group's unit over this one's.
    float unit = 1.0f, rescale = 1.0f;
  };
  // Values of `sums` per row: 16 per group of 256 input values.
  static int SumsPerRow(int K) { return 16 * ((K / 64 + 3) / 4); }
  // Input values per scale for rows of `format`: 256 for the K-quants (as
  // ggml's Q8_K), 32 for the others (as its Q8_0).
  static int InputScaleValues(BlockFormat format);
  // Quantizes row x of K values (K a multiple of 64; of 256 with
  // scale_values 256) into K / 64 chunks with one d_x per scale_values
  // values, and the sum of block 8g + i's codes into sums[16g + i] and
  // sums[16g + 8 + i], times d_x with 32 values per scale.
  static void QuantizeRow(const float* x, int K, XChunk* chunks, float* sums, int scale_values = 32);

 private:
  WeightArena arena_;
  std::vector<XChunk> x_, x256_;  // the inputs quantized per 32 and per 256 values
  std::vector<float> sums_, sums256_;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_BLOCK_LINEAR_H_
