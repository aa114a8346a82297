// Phi-3: Llama with q/k/v stored as one qkv_proj and gate/up as one
// gate_up_proj. Its sliding_window is applied by transformers only with
// FlashAttention-2, so it is ignored as transformers' default path ignores
// it.
#include "model/llama/llama_architecture.h"

namespace flover {

const LlamaArchitecture& Phi3Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "phi3";
    a.gguf = true;  // attn_qkv and ffn_up (gate then up) fused, as transformers stores them
    a.fused_projections = true;
    return a;
  }();
  return entry;
}

}  // namespace flover
