#include "kernels/ggml_dequant.h"

#include <cstring>

#include "kernels/host_values.h"

// Compiled with -ffp-contract=off (BUILD): `d * q + m` must round the
// product and then the sum, as ggml's reference and gguf-py do.
namespace flover::kernels {
namespace {

constexpr int kQK = 256;  // values per K-quant super-block

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// 32-value blocks: [d: f16][m: f16 (Q4_1, Q5_1)][qh: 4 bytes (Q5_*)][qs].
// Value j < 16 is the low nibble of qs[j], value j >= 16 the high nibble of
// qs[j - 16]; Q5's fifth bit of value j is bit j of qh.
void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((b[2 + j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
  }
}

void Q4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(b[4 + j] & 0x0F) + m;
    y[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
  }
}

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void Q5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint32_t qh = Load32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

void Q5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  const uint32_t qh = Load32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(hi) + m;
  }
}

void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// 256-value super-blocks. Q2_K: [scales: 16][qs: 64][d][dmin]; value e has
// 2 bits at shift 2 * ((e % 128) / 32) of qs[32 * (e / 128) + e % 32], and
// sub-block e / 16 has scale (scales & 15) * d and min (scales >> 4) * dmin.
void Q2_K(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = Half(b + 80), dmin = Half(b + 82);
  for (int e = 0; e < kQK; ++e) {
    const int s = e / 16;
    const float dl = d * static_cast<float>(sc[s] & 0x0F);
    const float ml = dmin * static_cast<float>(sc[s] >> 4);
    const int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K: [hmask: 32][qs: 64][scales: 12][d]. Sixteen 6-bit scales: the low
// 4 bits of scale k are nibble k / 8 of byte k % 8, the high 2 bits are bits
// 2 * (k / 4) of byte 8 + k % 4; minus 32. Value e: 2 low bits as Q2_K, and
// 4 subtracted unless bit e / 32 of hmask[e % 32] is set.
void Q3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = Half(b + 108);
  float dl[16];
  for (int k = 0; k < 16; ++k) {
    const int lo = (sc[k % 8] >> (4 * (k / 8))) & 0x0F;
    const int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 0x03;
    dl[k] = d * static_cast<float>(static_cast<int8_t>(lo | (hi << 4)) - 32);
  }
  for (int e = 0; e < kQK; ++e) {
    const int low = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int high = ((hmask[e % 32] >> (e / 32)) & 1) ^ 1;
    y[e] = dl[e / 16] * static_cast<float>(low - (high << 2));
  }
}

// Q4_K and Q5_K's eight 6-bit scales and mins, packed in 12 bytes: for
// j < 4 the low 6 bits of bytes j (scale) and j + 4 (min); for j >= 4 the
// nibbles of byte j + 4 below the top 2 bits of bytes j - 4 and j.
void ScaleMinK4(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K: [d][dmin][scales: 12][qs: 128]; sub-block s = e / 32 reads nibble
// s % 2 of qs[32 * (s / 2) + e % 32]. Q5_K adds [qh: 32] before qs: the
// fifth bit of value e is bit s of qh[e % 32].
template <bool kFive>
void QK_K45(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = kFive ? b + 48 : b + 16;
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    ScaleMinK4(scales, s, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    for (int j = 0; j < 32; ++j) {
      int q = (qs[32 * (s / 2) + j] >> (4 * (s % 2))) & 0x0F;
      if (kFive) q |= ((qh[j] >> s) & 1) << 4;
      y[32 * s + j] = d1 * static_cast<float>(q) - m1;
    }
  }
}

// Q6_K: [ql: 128][qh: 64][scales: 16 x int8][d]. Each half h of 128 values
// has four runs of 32: run r takes nibble r / 2 of ql[64 h + 32 (r % 2) + j]
// and bits 2 r of qh[32 h + j]; minus 32; sub-block e / 16 scales by
// d * scales.
void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, r = (e % 128) / 32, j = e % 32;
    const int low = (ql[64 * h + 32 * (r % 2) + j] >> (4 * (r / 2))) & 0x0F;
    const int high = (qh[32 * h + j] >> (2 * r)) & 3;
    const float dl = d * static_cast<float>(sc[e / 16]);
    y[e] = dl * static_cast<float>((low | (high << 4)) - 32);
  }
}

// IQ4_NL's non-linear 4-bit values (ggml's kvalues_iq4nl).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

// IQ4_NL: [d][qs: 16]; value j < 16 is the table at the low nibble of
// qs[j], value j >= 16 at the high nibble of qs[j - 16]; times d.
void IQ4_NL(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[b[2 + j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kIq4Values[b[2 + j] >> 4]);
  }
}

// IQ4_XS: [d][scales_h: u16][scales_l: 4][qs: 128]; sub-block s of 32
// values has the 6-bit scale (nibble s % 2 of scales_l[s / 2]) | (bits
// 2s, 2s + 1 of scales_h) << 4, minus 32, times d; its values as IQ4_NL's
// over qs[16 s .. 16 s + 15].
void IQ4_XS(const uint8_t* b, float* y) {
  const float d = Half(b);
  const int scales_h = b[2] | (b[3] << 8);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int s = 0; s < 8; ++s) {
    const int ls = ((scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[32 * s + j] = dl * static_cast<float>(kIq4Values[qs[16 * s + j] & 0x0F]);
      y[32 * s + j + 16] = dl * static_cast<float>(kIq4Values[qs[16 * s + j] >> 4]);
    }
  }
}

// MXFP4 (OCP microscaling; gpt-oss's experts): [e: e8m0][qs: 16]; values
// are e2m1 codes doubled (ggml's kvalues_mxfp4) times half the scale 2^(e -
// 127) (ggml_e8m0_to_fp32_half: the bits 0x00200000 << e below e = 2, else
// (e - 1) << 23); value j < 16 at the low nibble of qs[j], j >= 16 at the
// high nibble of qs[j - 16].
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void MXFP4(const uint8_t* b, float* y) {
  const uint32_t bits = b[0] < 2 ? (uint32_t{0x00200000} << b[0]) : (static_cast<uint32_t>(b[0] - 1) << 23);
  float d;
  std::memcpy(&d, &bits, 4);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kMxfp4Values[b[1 + j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kMxfp4Values[b[1 + j] >> 4]);
  }
}

}  // namespace

void GgmlIQ4NLAsQ8_0(const uint8_t* src, int64_t blocks, uint8_t* dst) {
  for (int64_t i = 0; i < blocks; ++i, src += 18, dst += 34) {
    std::memcpy(dst, src, 2);  // d
    for (int j = 0; j < 16; ++j) {
      dst[2 + j] = static_cast<uint8_t>(kIq4Values[src[2 + j] & 0x0F]);
      dst[2 + j + 16] = static_cast<uint8_t>(kIq4Values[src[2 + j] >> 4]);
    }
  }
}

const GgmlStandIn* GgmlStandInFor(uint32_t type) {
  static constexpr GgmlStandIn kStandIns[] = {
      {GgmlType::kQ3_K, GgmlType::kQ6_K, GgmlQ3KAsQ6K},
      {GgmlType::kIQ4_NL, GgmlType::kQ8_0, GgmlIQ4NLAsQ8_0},
  };
  for (const GgmlStandIn& s : kStandIns) {
    if (static_cast<uint32_t>(s.type) == type) return &s;
  }
  return nullptr;
}

void GgmlQ3KAsQ6K(const uint8_t* src, int64_t blocks, uint8_t* dst) {
  for (int64_t i = 0; i < blocks; ++i, src += 110, dst += 210) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* sc = src + 96;
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    std::memset(dst, 0, 192);
    for (int k = 0; k < 16; ++k) {  // as Q3_K above
      const int lo = (sc[k % 8] >> (4 * (k / 8))) & 0x0F;
      const int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 0x03;
      dst[192 + k] = static_cast<uint8_t>(static_cast<int8_t>((lo | (hi << 4)) - 32));
    }
    for (int e = 0; e < kQK; ++e) {
      const int low = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int high = (hmask[e % 32] >> (e / 32)) & 1;
      const int q = low + 4 * high + 28;  // Q3_K's low - 4 * (1 - high), plus 32
      const int h = e / 128, r = (e % 128) / 32, j = e % 32;  // as Q6_K above
      ql[64 * h + 32 * (r % 2) + j] |= static_cast<uint8_t>((q & 0x0F) << (4 * (r / 2)));
      qh[32 * h + j] |= static_cast<uint8_t>((q >> 4) << (2 * r));
    }
    std::memcpy(dst + 208, src + 108, 2);  // d
  }
}

void GgmlDequantize(const GgmlTypeInfo& type, const uint8_t* src, int64_t n, float* dst) {
  const int64_t blocks = n / type.block_size;
  switch (static_cast<GgmlType>(type.id)) {
    case GgmlType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Half(src + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return;
    default:
      break;
  }
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (static_cast<GgmlType>(type.id)) {
    case GgmlType::kQ4_0: block = Q4_0; break;
    case GgmlType::kQ4_1: block = Q4_1; break;
    case GgmlType::kQ5_0: block = Q5_0; break;
    case GgmlType::kQ5_1: block = Q5_1; break;
    case GgmlType::kQ8_0: block = Q8_0; break;
    case GgmlType::kQ2_K: block = Q2_K; break;
    case GgmlType::kQ3_K: block = Q3_K; break;
    case GgmlType::kQ4_K: block = QK_K45<false>; break;
    case GgmlType::kQ5_K: block = QK_K45<true>; break;
    case GgmlType::kQ6_K: block = Q6_K; break;
    case GgmlType::kIQ4_NL: block = IQ4_NL; break;
    case GgmlType::kIQ4_XS: block = IQ4_XS; break;
    case GgmlType::kMXFP4: block = MXFP4; break;
    default: return;  // callers check `dequantizes` first
  }
  for (int64_t i = 0; i < blocks; ++i) block(src + i * type.type_size, dst + i * type.block_size);
}

}  // namespace flover::kernels
