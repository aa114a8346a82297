// The rotary embeddings' base frequencies every family starts from.
#ifndef FLOVER_MODEL_DECODER_ROTARY_H_
#define FLOVER_MODEL_DECODER_ROTARY_H_

#include <cmath>
#include <vector>

namespace flover {

// inv_freq[i] = 1 / theta^(2i / dims) for i < dims / 2, in float32 as
// transformers computes them (Llama's rotary embedding, GPT-J's sinusoids):
// the frequencies of a rotary embedding over `dims` dims of a head.
inline std::vector<float> RotaryInvFreq(float theta, int dims) {
  std::vector<float> inv(dims / 2);
  for (int i = 0; i < dims / 2; ++i) {
    inv[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(dims));
  }
  return inv;
}

}  // namespace flover

#endif  // FLOVER_MODEL_DECODER_ROTARY_H_
