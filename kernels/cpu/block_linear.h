// Linear layers on weights kept in GGUF's quantized blocks (--dtype=native;
// kernels/block_format.h): Q8_0, Q4_0, Q4_1, Q4_K and Q6_K, read where they
// lie, with AVX-512 VNNI.
//
// The arithmetic, per output (row m, column n), for every row count:
//   - the input row is quantized per 32 values, as ggml's Q8_0 does:
//     d_x = max|x| / 127, q_x = round(x / d_x) (to nearest even), s_x = sum q_x;
//   - per 64 values (two input blocks), one u8 x s8 dot product (vpdpbusd)
//     sums the weight's integer codes times q_x exactly in int32, 16 lanes of
//     4 products; a format's code offset (8 for Q4_0, 32 for Q6_K, 128 for
//     Q8_0, whose s8 codes are biased to u8) is taken out of the integer sum
//     exactly;
//   - each lane's int32 becomes float32 and is added into a 16-lane float
//     accumulator as float(dot) * (w_scale * d_x), plus w_min * d_x * s_x / 8
//     for the formats with a minimum (Q4_1, Q4_K), w_scale and w_min being the
//     lane's sub-block's scale and minimum as ggml's dequantization computes
//     them (d * sc, dmin * m in float32);
//   - the 16 lanes are added in one fixed order, then the bias, gelu or the
//     residual.
// Nothing in it depends on M, on the tile a column falls in or on the thread
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
  // rows and K is a whole number of 64 values (256 for Q4_K / Q6_K).
  static absl::Status CheckShape(const HostValues& w, int K, int N, WeightLayout layout);

  // Copies the blocks as they are (the weight's bytes are the file's).
  absl::StatusOr<std::unique_ptr<Weight>> Prepare(HostValues w, int K, int N, WeightLayout layout);
  // Whether w came from Prepare.
  static bool Holds(const Weight& w);
  // out[M, N] = epilogue(x[M, K] @ W^T + bias).
  void Run(const float* x, int M, const Weight& w, const float* bias, Epilogue epilogue, float* out);

  // One input chunk of 64 values as Run quantizes it (public for tests).
  struct alignas(64) XChunk {
    int8_t q[64];
    float dx[16];          // each lane's block's d_x (lanes 0-7 the first block)
    float xs[16];          // d_x * s_x / 8 of each lane's block
    int32_t neg_lanes[16]; // -(the lane's 4 codes summed)
  };
  // Quantizes row x of K values (K a multiple of 64) into K / 64 chunks.
  static void QuantizeRow(const float* x, int K, XChunk* out);

 private:
  WeightArena arena_;
  std::vector<XChunk> x_;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_BLOCK_LINEAR_H_
