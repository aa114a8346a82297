// LFM2 (Lfm2ForCausalLM): a hybrid of short convolutions (conv) and
// attention (full_attention) layers, as layer_types (or full_attn_idxs)
// says. A short convolution projects the layer's input to B, C and x and
// outputs C * conv(B * x) (conv_L_cache taps, no bias) through out_proj.
// Its attention has per-head Q/K norms (q_layernorm, k_layernorm); its norms
// are plain RMSNorms (norm_eps): operator_norm before the mixer, ffn_norm
// before the MLP, embedding_norm after the last layer. The MLP's width is
// block_ff_dim (or intermediate_size) adjusted as transformers does: 2/3 of
// it, times block_ffn_dim_multiplier, rounded up to block_multiple_of.
// GGUF (llama.cpp's lfm2): attention.head_count_kv per layer, 0 for the
// convolutions; shortconv.l_cache.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

absl::Status ParseLfm2(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  auto kernel = JsonIntField(s, "conv_L_cache", 2, 16, what);
  if (!kernel.ok()) return kernel.status();
  c->conv_kernel = *kernel;
  if (JsonBoolField(s, "conv_bias", false)) return refuse("conv_bias is not supported");
  auto eps = JsonNumberField(s, "norm_eps", 1e-5, what);
  if (!eps.ok()) return eps.status();
  c->rms_norm_eps = static_cast<float>(*eps);
  const char* width_key = JsonHas(s, "block_ff_dim") ? "block_ff_dim" : "intermediate_size";
  auto width = JsonIntField(s, width_key, 1, 1 << 20, what);
  if (!width.ok()) return width.status();
  int ff = *width;
  if (JsonBoolField(s, "block_auto_adjust_ff_dim", false)) {
    ff = static_cast<int>(2 * ff / 3);
    auto multiplier = JsonNumberField(s, "block_ffn_dim_multiplier", 1.0, what);
    if (!multiplier.ok()) return multiplier.status();
    if (!(*multiplier > 0 && *multiplier <= 64)) {
      return refuse("block_ffn_dim_multiplier ", *multiplier, " is out of range (0, 64]");
    }
    ff = static_cast<int>(*multiplier * ff);
    auto multiple = JsonIntField(s, "block_multiple_of", 1, 1 << 20, what);
    if (!multiple.ok()) return multiple.status();
    ff = *multiple * ((ff + *multiple - 1) / *multiple);
  }
  if (ff < 1) return refuse("the MLP's width works out to ", ff);
  c->intermediate = ff;
  return absl::OkStatus();
}

// llama.cpp's lfm2 keys: the convolution's taps; attention.head_count_kv,
// per layer (0 for a convolution), was read by LlamaConfigFromGguf.
absl::Status Lfm2Gguf(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  FLOVER_ASSIGN_OR_RETURN(const int64_t taps, f.GetInt(a + "shortconv.l_cache"));
  if (taps < 2 || taps > 16) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, "shortconv.l_cache ", taps, " is out of range"));
  }
  c->conv_kernel = static_cast<int>(taps);
  return absl::OkStatus();
}

}  // namespace

const LlamaArchitecture& Lfm2Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "lfm2";
    a.gguf = true;
    a.qk_norm = true;
    a.tied_by_default = true;
    a.layer_types = true;
    a.recurrent_layer = "conv";
    a.parse = ParseLfm2;
    a.gguf_parse = Lfm2Gguf;
    a.renames = {
        {".input_layernorm.", ".operator_norm."},       {".post_attention_layernorm.", ".ffn_norm."},
        {"model.norm.", "model.embedding_norm."},       {".self_attn.q_norm.", ".self_attn.q_layernorm."},
        {".self_attn.k_norm.", ".self_attn.k_layernorm."}, {".self_attn.o_proj.", ".self_attn.out_proj."},
        {".mlp.gate_proj.", ".feed_forward.w1."},       {".mlp.up_proj.", ".feed_forward.w3."},
        {".mlp.down_proj.", ".feed_forward.w2."},
    };
    a.gguf_layer_names = {
        {"conv.in_proj.weight", "shortconv.in_proj.weight"},
        {"conv.conv.weight", "shortconv.conv.weight"},
        {"conv.out_proj.weight", "shortconv.out_proj.weight"},
    };
    a.gguf_output_norm = "token_embd_norm.weight";
    return a;
  }();
  return entry;
}

}  // namespace flover
