// The architectures of the Llama family, one file each (arch_llama.cc,
// arch_qwen2.cc, arch_qwen3.cc, arch_mistral.cc, arch_phi3.cc,
// arch_gemma2.cc, arch_gemma3.cc, the mixtures of experts
// arch_mixtral.cc, arch_qwen2_moe.cc, arch_qwen3_moe.cc, arch_olmoe.cc, and
// the hybrids arch_qwen3_5.cc, arch_qwen3_5_moe.cc, arch_qwen3_next.cc,
// arch_lfm2.cc, arch_granite_hybrid.cc, gpt-oss, arch_gpt_oss.cc, and Gemma 4,
// arch_gemma4.cc): what each
// adds to the skeleton the family shares — its config.json keys and
// defaults, its changes to the DecoderSpec, how its weights are stored —
// registered in one table. The family's config parsing, decoder spec,
// weight recipes and GGUF reading consult an architecture's entry instead
// of comparing names. A new architecture of the family is a new file and a
// line in the table (llama_architecture.cc).
#ifndef FLOVER_MODEL_LLAMA_LLAMA_ARCHITECTURE_H_
#define FLOVER_MODEL_LLAMA_LLAMA_ARCHITECTURE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"
#include "model/decoder/decoder_spec.h"
#include "model/decoder/decoder_weights.h"

namespace flover {

struct LlamaConfig;
class GgufFile;
class WeightSource;

struct LlamaArchitecture {
  const char* model_type = "";  // config.json's model_type (and GGUF's general.architecture)
  bool gguf = false;            // read from GGUF files too
  // GGUF's general.architecture where it is not model_type (qwen3moe), and
  // whether the entry is the one for files with experts (a "llama" file
  // with expert_count is Mixtral).
  const char* gguf_name = nullptr;
  bool moe = false;
  // llama.cpp's renormalisation of the chosen experts' weights, which GGUF
  // files do not record: true for its llama (Mixtral) and qwen3moe.
  bool gguf_moe_renormalize = false;
  // GGUF files: the architecture's own keys (`prefix` is "<arch>."), and
  // what llama.cpp fixes for it where files do not say; after the family's
  // keys, before the config is checked.
  absl::Status (*gguf_parse)(const GgufFile& f, const std::string& prefix, LlamaConfig* c) = nullptr;
  // In GGUF files, Q's rows permuted by query heads and K's by key/value
  // heads (llama.cpp's converter does so for its llama architecture).
  bool gguf_permuted_qk = false;
  // config.json: the one activation it runs (hidden_act or
  // hidden_activation), q/k/v biases always, the head tied to the embedding
  // when the config does not say, head_dim when absent (0: hidden / heads).
  const char* activation = "silu";
  bool qkv_bias = false;
  // config.json's attention_bias is read by the architecture's parse hook
  // (gpt-oss: biases on q, k, v and o), not refused.
  bool attention_bias = false;
  bool tied_by_default = false;
  int default_head_dim = 0;
  // Its own keys (sliding windows, scalars), read after model_type and the
  // activation, before the shapes; refuses what Flover does not run of it.
  absl::Status (*parse)(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) = nullptr;
  // A built-in model of this architecture (llama-1b's shapes, its settings).
  void (*builtin)(LlamaConfig* c) = nullptr;
  // The decoder: its changes to the family's spec (block order, activation,
  // per-layer windows), and how its weights are stored: q/k/v and gate/up
  // fused (Phi-3), norms that scale by (1 + w) with norms after attention
  // and the MLP too (Gemma 2).
  void (*spec)(const LlamaConfig& c, DecoderSpec* s) = nullptr;
  bool fused_projections = false;
  bool gemma_norms = false;
  // Q and K normed per head (q_norm, k_norm: [head_dim]; Qwen3, Gemma 3):
  // DecoderSpec::qk_norm, and the recipes read the weights.
  bool qk_norm = false;
  // With qk_norm: one norm over all of Q and one over all of K (OLMoE).
  bool qk_norm_whole = false;
  // A mixture of experts (its parse hook reads the config's MoE keys with
  // ParseMoe): layer N's router is "model.layers.N.<moe_router>.weight",
  // expert e's matrices "model.layers.N.<moe_experts>.e.<name>.weight" for
  // the names of its gate, up and down projections.
  const char* moe_router = "mlp.gate";
  const char* moe_experts = "mlp.experts";
  const char* moe_gate = "gate_proj";
  const char* moe_up = "up_proj";
  const char* moe_down = "down_proj";
  // Every norm of the model scales by (1 + w), not only Gemma's sandwich
  // (Qwen3.5's zero-centred norms: the layers', the final one and the Q/K
  // norms; a recurrent layer's own gated norm keeps w).
  bool zero_centered_norms = false;
  // Attention's output times sigmoid(gate) (Qwen3.5: q_proj holds each
  // head's Q rows, then its gate's).
  bool attn_output_gate = false;
  // Hybrid models: config.json's layer_types say each layer's kind; with
  // mamba_layers its recurrent layers are Mamba-2 (Granite's "mamba", which
  // transformers 5 writes as "linear_attention").
  bool layer_types = false;
  bool mamba_layers = false;
  // Its recurrent layers' name in layer_types ("linear_attention", "conv",
  // "mamba"): another recurrent kind is refused by name.
  const char* recurrent_layer = nullptr;
  // Its image-text checkpoints (Qwen3.5's "qwen3_5"): their model_type,
  // whose text_config is this architecture, and the prefix of their
  // language model's tensors.
  struct ImageText {
    const char* model_type;
    const char* text_prefix = "model.language_model.";
    // Its image rows take additions after the first layers, one for each
    // of vision_config's deepstack_visual_indexes (Qwen3-VL).
    bool deepstack = false;
  };
  std::vector<ImageText> image_text;
  // Where its checkpoints name a tensor otherwise than Llama's: each
  // (part of Llama's name, the architecture's), e.g. LFM2's
  // (".input_layernorm.", ".operator_norm.").
  std::vector<std::pair<const char*, const char*>> renames;
  // GGUF: a layer's tensor (after "model.layers.N.") by llama.cpp's name
  // (after "blk.N."), where it differs from Llama's files or is its own.
  std::vector<std::pair<const char*, const char*>> gguf_layer_names;
  // GGUF: a layer's experts' gate and up in one 3-D tensor,
  // ffn_gate_up_exps ([E, 2 Fe, C]: each expert's gate rows, then its up
  // rows; Gemma 4), not two.
  bool gguf_fused_gate_up = false;
  // GGUF: the final norm's name where it is not output_norm.
  const char* gguf_output_norm = nullptr;
  // A mixture's experts as 3-D tensors (after "model.layers.N."): each
  // expert's gate rows then up rows [E, 2 Fe, C], and its down [E, C, Fe];
  // read so where the checkpoint holds them (LlamaConfig::experts_packed).
  const char* moe_packed_gate_up = nullptr;
  const char* moe_packed_down = nullptr;
  // Its shared expert's gate and up rows in one [2 Fs, C] tensor (after
  // "model.layers.N."; Granite's shared_mlp.input_linear, which is the
  // dense MLP of a Granite without experts), and whether a sigmoid gate
  // scales the shared expert's output (Qwen2-MoE's, Qwen3.5-MoE's) or not
  // (Granite's).
  const char* shared_fused_up = nullptr;
  bool shared_expert_gated = true;
  // GGUF files of this architecture with experts and without are both it
  // (Granite 4.0-H: -Tiny has experts, -Micro none).
  bool experts_optional = false;
  // A checkpoint directory's weights as the recipes ask for them, where the
  // architecture stores them otherwise than a rename or a row slice can say
  // (gpt-oss's experts: [E, C, 2F] with gate and up interleaved); null: as
  // they are.
  std::unique_ptr<WeightSource> (*checkpoint_source)(std::unique_ptr<WeightSource> inner,
                                                     const LlamaConfig& c) = nullptr;
  // Gemma 4: the sandwich's norms (and the Q/K norms) scale by w, not by
  // (1 + w).
  bool plain_norms = false;
  // config.json's rope_parameters are keyed by layer type
  // (sliding_attention, full_attention), read by its parse hook (Gemma 4).
  bool rope_by_layer_type = false;
  // GGUF: its keys may hold a value per layer (Gemma 4's feed_forward_length
  // and attention.head_count_kv), which its gguf_parse reads; the family
  // takes the first layer's.
  bool gguf_layer_arrays = false;
  // A layer's parameters beyond the family's (Gemma 4's per-layer input and
  // scalar), visited after them.
  void (*layer_recipes)(const LlamaConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& out,
                        const DecoderRecipes::Visit& visit) = nullptr;
  int norms_per_layer() const { return gemma_norms ? 4 : 2; }
};

// What the Gemma architectures share (arch_gemma2.cc): the entry's settings
// — GeGLU-tanh, a tied head and head_dim 256 by default, (1 + w) norms
// before and after attention and the MLP — and the spec's block:
// sandwich norms, GeGLU-tanh, embeddings times sqrt(hidden).
LlamaArchitecture GemmaArchitecture(const char* model_type);
void GemmaBlock(const LlamaConfig& c, DecoderSpec* s);
// What Gemma 2's and 3's GGUF files share, as llama.cpp reads them: norms
// stored as 1 + w; the final soft-cap; the window (`window_absent` where the
// file has none); query_pre_attn_scalar, which files do not carry: head_dim,
// but hidden / heads for the 27B model (`large_layers` layers).
absl::Status GemmaGguf(const GgufFile& f, const std::string& prefix, int large_layers, int64_t window_absent,
                       LlamaConfig* c);

// llama.cpp's ssm.* keys for a recurrent layer's shapes (Qwen's delta net,
// Mamba-2): the convolution's taps, the state size, the groups (the delta
// net's key heads), the heads (ssm.time_step_rank: its value heads) and each
// head's size (ssm.inner_size over the heads).
struct GgufSsmShapes {
  int conv_kernel = 0, state_size = 0, groups = 0, heads = 0, head_dim = 0;
};
absl::StatusOr<GgufSsmShapes> ReadGgufSsmShapes(const GgufFile& f, const std::string& prefix);

// What Qwen3.5, Qwen3.5-MoE and Qwen3-Next share (arch_qwen3_5.cc): the
// gated delta net's config.json keys, and llama.cpp's keys for it (ssm.*,
// full_attention_interval), its norms stored as 1 + w and A as -exp(A_log).
absl::Status ParseQwen3_5Linear(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c);
absl::Status Qwen3_5LinearGguf(const GgufFile& f, const std::string& prefix, LlamaConfig* c);
// llama.cpp's rope.dimension_sections (t, h, w, 0), where the file has
// them: the multimodal rotary's sections, interleaved (its "imrope":
// Qwen3-VL's and Qwen3.5's).
absl::Status GgufMropeSections(const GgufFile& f, const std::string& prefix, LlamaConfig* c);
// The same with the value heads tiled over the key heads (qwen35, qwen35moe).
absl::Status Qwen3_5TiledGguf(const GgufFile& f, const std::string& prefix, LlamaConfig* c);
void Qwen3_5Entry(LlamaArchitecture* a);

// Every architecture of the family, by model_type.
const std::vector<const LlamaArchitecture*>& LlamaArchitectures();
// The architecture whose image-text checkpoints have `model_type`, or null;
// *deepstack (where not null) says whether their image rows take additions
// after the first layers (ImageText::deepstack).
const LlamaArchitecture* FindLlamaTextOf(absl::string_view model_type, std::string* text_prefix,
                                         bool* deepstack = nullptr);
// The architecture of `model_type`, or null.
const LlamaArchitecture* FindLlamaArchitecture(absl::string_view model_type);
// The architecture a GGUF file of general.architecture `name` is read as
// (with or without experts), or null.
const LlamaArchitecture* FindGgufArchitecture(absl::string_view name, bool experts);

// The entries (one per arch_*.cc), made on first use.
const LlamaArchitecture& LlamaArch();
const LlamaArchitecture& Qwen2Arch();
const LlamaArchitecture& Qwen3Arch();
const LlamaArchitecture& Qwen3VlArch();
const LlamaArchitecture& MistralArch();
const LlamaArchitecture& Phi3Arch();
const LlamaArchitecture& Gemma2Arch();
const LlamaArchitecture& Gemma3Arch();
const LlamaArchitecture& MixtralArch();
const LlamaArchitecture& Qwen2MoeArch();
const LlamaArchitecture& Qwen3MoeArch();
const LlamaArchitecture& SmolLM3Arch();
const LlamaArchitecture& OlmoeArch();
const LlamaArchitecture& Qwen3_5Arch();
const LlamaArchitecture& Qwen3_5MoeArch();
const LlamaArchitecture& Qwen3NextArch();
const LlamaArchitecture& Lfm2Arch();
const LlamaArchitecture& GraniteHybridArch();
const LlamaArchitecture& GptOssArch();
const LlamaArchitecture& Gemma4Arch();

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_ARCHITECTURE_H_
