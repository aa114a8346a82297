// Linear layers on weights kept in GGUF's quantized blocks (--dtype=native;
// kernels/block_format.h): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and MXFP4,
// read where they lie, with AVX-512 VNNI, AVX-VNNI or AVX2 (the widest that
// the instruction set in use allows, cpu_isa.h).
//
// Prepare repacks a weight's blocks once, at load, into tiles of 16 columns:
// per block of 32 values, the 16 columns' scales (f16, or the K-quants'
// small integers under f16 super-block scales), then their codes in 8 steps
// of 4 values, column j's in lane j. The values and their bytes are the
// file's (Q4_K, Q5_K: 4 bytes more per 256 values, 6-bit scales unpacked).
//
// The arithmetic, per output (row m, column n), for every row count:
//   - the input row is quantized per 32 values, as ggml's Q8_0 does (per 256
//     for the K-quants Q4_K, Q5_K, Q6_K, as its Q8_K does):
//     d_x = max|x| / 127, q_x = round(x / d_x) (to nearest even), s_x = sum q_x;
//   - per block of 32 values (Q6_K: per sub-block of 16), eight u8 x s8 dot
//     products (vpdpbusd, the input's 4 codes broadcast) sum the weight's
//     integer codes times q_x exactly in int32, the format's code offset
//     (8 for Q4_0, 16 for Q5_0, 32 for Q6_K, 128 for Q8_0, whose s8 codes are
//     biased to u8, 16 for MXFP4, whose doubled e2m1 values a table lookup
//     biases to 4 .. 28) taken out exactly as offset * s_x;
//   - that int32 becomes float32 and is added into the column's sum as
//     float(dot) * (w_scale * d_x), w_scale being the block's scale as
//     ggml's dequantization computes it (d, d * sc in float32, or MXFP4's
//     2^(e - 128) from its e8m0 byte); then, for
//     the formats with a minimum (Q4_1, Q5_1, Q4_K, Q5_K), w_min * (d_x * s_x)
//     (w_min = m, or -(dmin * m) in float32 as ggml);
//   - the blocks in order, one float32 sum per column; then the bias, gelu
//     or the residual.
// Tiles run up to 8 rows over each decoded block (AVX-512; AVX-VNNI 4, AVX2
// 6 per half of 8 columns). Nothing in the arithmetic
// depends on M, on the tile or lane a column falls in, on the thread that
// runs it or on the instruction set (16 lanes as one AVX-512 register or two
// AVX2 ones; AVX2 without VNNI sums pairs of u8 x s8 products in 16 bits
// over runs of steps that keep every partial sum below 2^15, and Q8_0's
// codes as s8 magnitudes times signed inputs: exact too), so a row's result
// is bitwise the same at any batch size, and on any x86-64 CPU since Haswell.
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
  // OK where this CPU runs the kernels (AVX2 with FMA and F16C, and a valid
  // FLOVER_CPU_ISA); FailedPrecondition naming what is missing otherwise.
  static absl::Status CheckSupported();

  // The kernels Run uses: by default the widest the instruction set in use
  // allows; tests pick narrower ones to compare them bitwise.
  enum class Tiles { kAvx2, kAvx2Vnni, kAvx512Vnni };
  static bool Runs(Tiles tiles);  // whether the instruction set in use allows them
  void set_tiles(Tiles tiles) { tiles_ = tiles; }  // one that Runs
  Tiles tiles() const { return tiles_; }

  // InvalidArgument unless w is blocks of [N, K] (kOutIn) whose spans cover N
  // rows and K is a whole number of 64 values (256 for the K-quants).
  static absl::Status CheckShape(const HostValues& w, int K, int N, WeightLayout layout);

  // Copies the blocks as they are (the weight's bytes are the file's).
  absl::StatusOr<std::unique_ptr<Weight>> Prepare(HostValues w, int K, int N, WeightLayout layout);
  // Whether w came from Prepare.
  static bool Holds(const Weight& w);
  // out[M, N] = epilogue(x[M, K] @ W^T + bias).
  void Run(const float* x, int M, const Weight& w, const float* bias, Epilogue epilogue, float* out);

  // One input block of 32 values as Run quantizes it (public for tests); its
  // codes lie apart, K int8 per row.
  struct InputBlock {
    float dx;        // d_x (with 256 values per scale: the group's)
    float sum;       // d_x * s_x
    int32_t neg[2];  // -(the sum of codes 0-15), -(codes 16-31)
  };
  // Input values per scale for rows of `format`: 256 for the K-quants (as
  // ggml's Q8_K), 32 for the others (as its Q8_0).
  static int InputScaleValues(BlockFormat format);
  // Quantizes row x of K values (K a multiple of 32; of 256 with
  // scale_values 256) into K codes and K / 32 blocks, one d_x per
  // scale_values values.
  static void QuantizeRow(const float* x, int K, int8_t* codes, InputBlock* blocks, int scale_values = 32);

 private:
  Tiles tiles_ = Runs(Tiles::kAvx512Vnni) ? Tiles::kAvx512Vnni
                 : Runs(Tiles::kAvx2Vnni) ? Tiles::kAvx2Vnni
                                          : Tiles::kAvx2;
  WeightArena arena_;
  struct Input {
    std::vector<int8_t> codes;
    std::vector<InputBlock> blocks;
  };
  Input x32_, x256_;  // the inputs quantized per 32 and per 256 values
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_BLOCK_LINEAR_H_
