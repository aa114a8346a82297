#include "model/llama/llama_checkpoint.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_gguf.h"
#include "model/loader/gguf_tokenizer.h"
#include "model/loader/checkpoint.h"
#include "model/loader/tokenizer_files.h"
#include "util/file_util.h"
#include "util/status_macros.h"

namespace flover {
namespace {

constexpr uint64_t kBuiltinSeed = 0x4c6c616d61ull;  // "Llama"

// Where a tensor the recipes name (after StoredLlamaName) is rows of a
// packed one in the checkpoint: an expert's gate, up or down of the 3-D
// tensors a layer's experts are stored in (LlamaConfig::experts_packed),
// the gate or up half of a fused shared MLP (Granite's).
bool LocatePacked(const LlamaConfig& c, absl::string_view name, SlicedSource::Slice* out) {
  const LlamaArchitecture& a = c.arch();
  const std::string layers = c.text_prefix + "layers.";
  if (!absl::ConsumePrefix(&name, layers)) return false;
  const size_t dot = name.find('.');
  int l = 0;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dot), &l)) return false;
  const std::string p = absl::StrCat(layers, l, ".");
  absl::string_view rest = name.substr(dot + 1);
  const int64_t C = c.hidden;
  if (a.shared_fused_up != nullptr) {
    const int64_t F = c.experts > 0 ? c.shared_expert_intermediate : c.intermediate;
    const std::string gate = c.experts > 0 ? "mlp.shared_expert.gate_proj.weight" : "mlp.gate_proj.weight";
    const std::string up = c.experts > 0 ? "mlp.shared_expert.up_proj.weight" : "mlp.up_proj.weight";
    if (rest == gate || rest == up) {
      *out = {p + a.shared_fused_up, {2 * F, C}, -1, rest == gate ? 0 : F, F};
      return true;
    }
  }
  if (!c.experts_packed || !absl::ConsumePrefix(&rest, absl::StrCat(a.moe_experts, "."))) return false;
  const size_t sep = rest.find('.');
  int e = 0;
  if (sep == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, sep), &e)) return false;
  const absl::string_view proj = rest.substr(sep + 1);
  const int64_t E = c.experts, F = c.expert_intermediate;
  if (proj == "gate_proj.weight" || proj == "up_proj.weight") {
    *out = {p + a.moe_packed_gate_up, {E, 2 * F, C}, e, proj == "gate_proj.weight" ? 0 : F, F};
    return true;
  }
  if (proj == "down_proj.weight") {
    *out = {p + a.moe_packed_down, {E, C, F}, e, 0, C};
    return true;
  }
  return false;
}

}  // namespace

std::string StoredLlamaName(const LlamaConfig& c, absl::string_view name) {
  // The multi-token-prediction layer, which the recipes name as llama.cpp's
  // files do (layer n_layer, its own tensors under nextn.): mtp.* beside the
  // text model.
  if (c.mtp_layers > 0) {
    const std::string mtp = absl::StrCat("model.layers.", c.n_layer, ".");
    if (absl::ConsumePrefix(&name, mtp)) {
      for (auto [from, to] : {std::pair{"nextn.eh_proj.weight", "mtp.fc.weight"},
                              std::pair{"nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight"},
                              std::pair{"nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight"},
                              std::pair{"nextn.shared_head_norm.weight", "mtp.norm.weight"}}) {
        if (name == from) return to;
      }
      return absl::StrCat("mtp.layers.0.", name);
    }
  }
  std::string out(name);
  for (const auto& [from, to] : c.arch().renames) {
    if (const size_t at = out.find(from); at != std::string::npos) {
      out.replace(at, std::string_view(from).size(), to);
      break;
    }
  }
  if (c.text_prefix != "model." && absl::StartsWith(out, "model.")) out = c.text_prefix + out.substr(6);
  return out;
}

std::string BuiltinLlamaNames() {
  return "builtin:llama-tiny, builtin:llama-tiny-hd32, builtin:llama-1b, builtin:qwen2-1b, builtin:phi3-1b, "
         "builtin:gemma2-1b, builtin:qwen3-0.6b, builtin:mistral-tiny, builtin:mistral-1b, builtin:gemma3-tiny, "
         "builtin:gemma3-1b, builtin:mixtral-tiny, builtin:olmoe-1b, builtin:qwen3.5-tiny, builtin:qwen3.5-tiny-hd32, "
         "builtin:qwen3.5-0.8b, "
         "builtin:qwen3.5-moe-tiny, builtin:lfm2-tiny, builtin:lfm2-1.2b, builtin:granite-h-tiny, "
         "builtin:gpt-oss-tiny, builtin:gpt-oss-20b, builtin:gemma4-tiny, builtin:gemma4-e2b";
}

absl::StatusOr<LlamaConfig> BuiltinLlamaConfig(absl::string_view name) {
  LlamaConfig c;
  if (name == "llama-tiny") {
    c.n_layer = 2;
    c.hidden = 64;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.head_dim = 16;
    c.intermediate = 128;
    c.vocab_size = 512;
    c.max_positions = 512;
    c.rope_theta = 10000.0;
  } else if (name == "llama-1b" || name == "qwen2-1b" || name == "phi3-1b" ||
             name == "gemma2-1b") {
    // TinyLlama's shapes; the others in their family's layout (benchmarks
    // beside llama.cpp's files of the same shapes, make_llama_gguf.py).
    c.architecture = std::string(name.substr(0, name.find('-')));
    c.qkv_bias = c.arch().qkv_bias;
    if (c.arch().builtin != nullptr) c.arch().builtin(&c);
    c.n_layer = 22;
    c.hidden = 2048;
    c.n_head = 32;
    c.n_kv_head = 4;
    c.head_dim = 64;
    c.intermediate = 5632;
    c.vocab_size = 32000;
    c.max_positions = 2048;
    c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-5f;
  } else if (name == "llama-tiny-hd32") {
    // llama-tiny with heads of 32 dims (two query heads to one key/value
    // head): the narrowest a q8_0 / q4_0 KV cache holds.
    c = *BuiltinLlamaConfig("llama-tiny");
    c.n_head = 2;
    c.n_kv_head = 1;
    c.head_dim = 32;
  } else if (name == "mistral-tiny") {
    // llama-tiny's shapes, every layer attending its last 40 positions (not
    // a whole number of KV blocks).
    c = *BuiltinLlamaConfig("llama-tiny");
    c.architecture = "mistral";
    c.sliding_window = 40;
  } else if (name == "mistral-1b") {
    // TinyLlama's shapes with Mistral 7B's window of 4096 positions, to 16K.
    c = *BuiltinLlamaConfig("llama-1b");
    c.architecture = "mistral";
    c.max_positions = 16384;
    c.sliding_window = 4096;
  } else if (name == "gemma3-tiny") {
    // llama-tiny's shapes in Gemma 3's layout, 6 layers: five local ones
    // (window 40, their own rotary base) to one global.
    c = *BuiltinLlamaConfig("llama-tiny");
    c.architecture = "gemma3_text";
    c.n_layer = 6;
    c.tie_word_embeddings = true;
    c.query_pre_attn_scalar = 16;
    c.sliding_window = 40;
    c.sliding_window_pattern = 6;
    c.rope_local_base = 10000.0;
    c.rope_theta = 1000000.0;
  } else if (name == "gemma3-1b") {
    // Gemma 3 1B's shapes: 26 layers, five local (window 512) to one
    // global, one key/value head of 256, its 262,144-token vocabulary.
    c.architecture = "gemma3_text";
    c.n_layer = 26;
    c.hidden = 1152;
    c.n_head = 4;
    c.n_kv_head = 1;
    c.head_dim = 256;
    c.intermediate = 6912;
    c.vocab_size = 262144;
    c.max_positions = 32768;
    c.rms_norm_eps = 1e-6f;
    c.tie_word_embeddings = true;
    c.query_pre_attn_scalar = 256;
    c.sliding_window = 512;
    c.sliding_window_pattern = 6;
    c.rope_local_base = 10000.0;
    c.rope_theta = 1000000.0;
  } else if (name == "mixtral-tiny") {
    // llama-tiny's shapes with 8 experts, 2 per token, in every layer.
    c = *BuiltinLlamaConfig("llama-tiny");
    c.architecture = "mixtral";
    c.experts = 8;
    c.experts_per_tok = 2;
    c.expert_intermediate = 64;
    c.norm_topk_prob = true;
  } else if (name == "olmoe-1b") {
    // OLMoE-1B-7B's shapes: 64 experts of width 1024, 8 per token.
    c.architecture = "olmoe";
    c.n_layer = 16;
    c.hidden = 2048;
    c.n_head = 16;
    c.n_kv_head = 16;
    c.head_dim = 128;
    c.intermediate = 1024;
    c.experts = 64;
    c.experts_per_tok = 8;
    c.expert_intermediate = 1024;
    c.vocab_size = 50304;
    c.max_positions = 4096;
    c.rms_norm_eps = 1e-5f;
  } else if (name == "qwen3-0.6b") {
    // Qwen3-0.6B's shapes (its vocabulary, a tied head, its context).
    c.architecture = "qwen3";
    c.n_layer = 28;
    c.hidden = 1024;
    c.n_head = 16;
    c.n_kv_head = 8;
    c.head_dim = 128;
    c.intermediate = 3072;
    c.vocab_size = 151936;
    c.max_positions = 40960;  // as its config.json
    c.rope_theta = 1000000.0;
    c.tie_word_embeddings = true;
  } else if (name == "qwen3.5-tiny" || name == "qwen3.5-tiny-hd32" || name == "qwen3.5-0.8b") {
    // Qwen3.5: three gated delta net layers to one attention layer. tiny:
    // llama-tiny's width, 8 layers, value heads two to a key head (hd32:
    // attention heads of 32, two query heads to one key/value head, which a
    // q8_0 / q4_0 KV cache holds); 0.8b: Qwen3.5-0.8B's shapes (its
    // vocabulary, a tied head).
    const bool tiny = name != "qwen3.5-0.8b", hd32 = name == "qwen3.5-tiny-hd32";
    c.architecture = "qwen3_5_text";
    c.n_layer = tiny ? 8 : 24;
    c.hidden = tiny ? 64 : 1024;
    c.n_head = hd32 ? 2 : tiny ? 4 : 8;
    c.n_kv_head = hd32 ? 1 : 2;
    c.head_dim = hd32 ? 32 : tiny ? 16 : 256;
    c.intermediate = tiny ? 128 : 3584;
    c.vocab_size = tiny ? 512 : 248320;
    c.max_positions = tiny ? 512 : 32768;
    c.rope_theta = 10000000.0;
    c.tie_word_embeddings = true;
    c.conv_kernel = 4;
    c.linear_k_heads = tiny ? 2 : 16;
    c.linear_v_heads = tiny ? 4 : 16;
    c.linear_k_dim = c.linear_v_dim = tiny ? 16 : 128;
    for (int l = 0; l < c.n_layer; ++l) {
      c.layer_kinds.push_back((l + 1) % 4 == 0 ? LlamaConfig::LayerKind::kAttention
                                               : LlamaConfig::LayerKind::kLinearAttention);
    }
    c.arch().builtin(&c);  // a quarter of each head turns
    c.mtp_layers = 1;      // a multi-token-prediction layer, as released
  } else if (name == "qwen3.5-moe-tiny") {
    // Qwen3.5-MoE (Qwen3.6-35B-A3B's layout) at qwen3.5-tiny's shapes: 8
    // experts of width 32, 2 per token, and a gated shared expert.
    FLOVER_ASSIGN_OR_RETURN(c, BuiltinLlamaConfig("qwen3.5-tiny"));
    c.architecture = "qwen3_5_moe_text";
    c.experts = 8;
    c.experts_per_tok = 2;
    c.expert_intermediate = 32;
    c.shared_expert_intermediate = 64;
    c.norm_topk_prob = true;
  } else if (name == "granite-h-tiny") {
    // Granite 4.0-H's layout at llama-tiny's width: Mamba-2 layers (8 heads
    // of 16 in 2 groups, states of 16, 4 taps with a bias) and attention at
    // layers 2 and 5 of 6 without rotary embeddings, 8 experts of width 32,
    // 2 per token, beside a shared MLP; its four multipliers.
    c.architecture = "granitemoehybrid";
    c.n_layer = 6;
    c.hidden = 64;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.head_dim = 16;
    c.intermediate = 64;
    c.vocab_size = 512;
    c.max_positions = 512;
    c.rms_norm_eps = 1e-5f;
    c.tie_word_embeddings = true;
    c.layer_kinds.assign(c.n_layer, LlamaConfig::LayerKind::kMamba2);
    c.layer_kinds[2] = c.layer_kinds[5] = LlamaConfig::LayerKind::kAttention;
    c.conv_kernel = 4;
    c.mamba_heads = 8;
    c.mamba_head_dim = 16;
    c.mamba_groups = 2;
    c.mamba_state = 16;
    c.mamba_conv_bias = true;
    c.experts = 8;
    c.experts_per_tok = 2;
    c.expert_intermediate = 32;
    c.shared_expert_intermediate = 64;
    c.norm_topk_prob = true;
    c.embedding_multiplier = 12.0;
    c.residual_multiplier = 0.22;
    c.attention_multiplier = 0.25;
    c.logits_scaling = 6.0;
    c.no_rope = true;
  } else if (name == "gpt-oss-tiny" || name == "gpt-oss-20b") {
    // gpt-oss: tiny at llama-tiny's width (4 layers, a window of 16 on the
    // even ones, 8 experts of 64, 4 per token); 20b: gpt-oss-20b's shapes
    // (24 layers of 2880, 64 query heads of 64 over 8, 32 experts of 2880,
    // 4 per token, a window of 128, the o200k vocabulary's 201,088 rows).
    const bool tiny = name == "gpt-oss-tiny";
    c.architecture = "gpt_oss";
    c.n_layer = tiny ? 4 : 24;
    c.hidden = tiny ? 64 : 2880;
    c.n_head = tiny ? 4 : 64;
    c.n_kv_head = tiny ? 2 : 8;
    c.head_dim = tiny ? 16 : 64;
    c.intermediate = c.expert_intermediate = tiny ? 64 : 2880;
    c.experts = tiny ? 8 : 32;
    c.experts_per_tok = 4;
    c.vocab_size = tiny ? 512 : 201088;
    c.max_positions = tiny ? 512 : 131072;
    c.sliding_window = tiny ? 16 : 128;
    c.arch().builtin(&c);
  } else if (name == "gemma4-tiny" || name == "gemma4-e2b") {
    // Gemma 4. tiny: llama-tiny's width, 6 layers (every third global, with
    // heads of 32 over one KV head and V = K; a window of 16 on the others),
    // the last 3 reading layers 1 and 2's K and V with double-wide MLPs,
    // per-layer inputs of 16. e2b: Gemma 4 E2B's text shapes (35 layers of
    // 1536, 8 query heads of 256 over 1, 512 on every fifth layer; a window
    // of 512; the last 20 layers sharing, MLPs of 6144 and 12288; per-layer
    // inputs of 256; the 262,144-row vocabulary).
    const bool tiny = name == "gemma4-tiny";
    c.architecture = "gemma4_text";
    c.n_layer = tiny ? 6 : 35;
    c.hidden = tiny ? 64 : 1536;
    c.n_head = tiny ? 4 : 8;
    c.n_kv_head = tiny ? 2 : 1;
    c.head_dim = tiny ? 16 : 256;
    c.global_head_dim = tiny ? 32 : 512;
    c.global_kv_heads = 1;
    c.k_eq_v = tiny;
    c.intermediate = tiny ? 96 : 6144;
    c.double_wide_mlp = true;
    c.kv_shared_layers = tiny ? 3 : 20;
    c.ple_dim = tiny ? 16 : 256;
    c.vocab_size = c.ple_vocab = tiny ? 512 : 262144;
    c.max_positions = tiny ? 512 : 131072;
    c.sliding_window = tiny ? 16 : 512;
    for (int l = 0; l < c.n_layer; ++l) c.sliding_layers.push_back((l + 1) % (tiny ? 3 : 5) != 0 ? 1 : 0);
    c.rope_theta = c.global_rope_theta = 1e6;
    c.rope_local_base = 1e4;
    c.global_rope_angles = c.global_head_dim / 8;  // partial_rotary_factor 0.25
    c.layer_scalars = true;
    c.tie_word_embeddings = true;
    c.final_logit_softcapping = 30.0f;
  } else if (name == "lfm2-tiny" || name == "lfm2-1.2b") {
    // LFM2: short convolutions (3 taps) beside attention layers. tiny:
    // llama-tiny's width, 6 layers (two attention); 1.2b: LFM2-1.2B's
    // shapes, attention at layers 2, 5, 8, 10, 12 and 14 of 16.
    const bool tiny = name == "lfm2-tiny";
    c.architecture = "lfm2";
    c.n_layer = tiny ? 6 : 16;
    c.hidden = tiny ? 64 : 2048;
    c.n_head = tiny ? 4 : 32;
    c.n_kv_head = tiny ? 2 : 8;
    c.head_dim = tiny ? 16 : 64;
    c.intermediate = tiny ? 128 : 8192;
    c.vocab_size = tiny ? 512 : 65536;
    c.max_positions = tiny ? 512 : 32768;
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-5f;
    c.tie_word_embeddings = true;
    c.conv_kernel = 3;
    const std::vector<int> attention = tiny ? std::vector<int>{2, 4} : std::vector<int>{2, 5, 8, 10, 12, 14};
    c.layer_kinds.assign(c.n_layer, LlamaConfig::LayerKind::kShortConv);
    for (int l : attention) c.layer_kinds[l] = LlamaConfig::LayerKind::kAttention;
  } else {
    return absl::NotFoundError(absl::StrCat("no built-in Llama model \"", name, "\""));
  }
  c.bos_token_id = 1;
  c.eos_token_ids = {2};  // as TinyLlama's tokenizer
  return c;
}

absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> LlamaCheckpoint::Builtin(
    absl::string_view name, std::optional<kernels::BlockFormat> blocks) {
  auto config = BuiltinLlamaConfig(name);
  if (!config.ok()) return config.status();
  std::unique_ptr<LlamaCheckpoint> m(new LlamaCheckpoint());
  m->spec_ = absl::StrCat("builtin:", name);
  m->config_ = *config;
  m->source_ = GeneratedLlamaSource(*config, kBuiltinSeed, blocks);
  m->stored_dtype_ = m->source_->stored_dtype();
  m->info_ = InfoOf(m->config_);
  return m;
}

absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> LlamaCheckpoint::LoadDirectory(
    const std::string& dir) {
  std::unique_ptr<LlamaCheckpoint> m(new LlamaCheckpoint());
  m->spec_ = dir;
  const std::string config_path = dir + "/config.json";
  auto text = ReadFile(config_path);
  if (!text.ok()) return text.status();
  auto config = ParseLlamaConfig(*text, config_path);
  if (!config.ok()) return config.status();
  m->config_ = *config;
  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  // The base model saved alone (Qwen3Model: embedding checkpoints such as
  // Qwen3-Embedding): its tensors without the "model." prefix, no head.
  if (m->config_.text_prefix == "model." && ckpt->Find("model.embed_tokens.weight") == nullptr &&
      ckpt->Find("embed_tokens.weight") != nullptr) {
    m->config_.text_prefix = "";
  }
  // An image-text checkpoint as its Hub files name the language model
  // (Gemma 3's language_model.model., which transformers 5 also saves) or
  // as transformers 5 holds it (model.language_model.): whichever has the
  // embedding.
  for (const char* other : {"model.language_model.", "language_model.model."}) {
    const std::string& prefix = m->config_.text_prefix;
    if (prefix != "model." && prefix != "" && ckpt->Find(prefix + "embed_tokens.weight") == nullptr &&
        ckpt->Find(std::string(other) + "embed_tokens.weight") != nullptr) {
      m->config_.text_prefix = other;
    }
  }
  std::string stored = "F32";
  if (const TensorInfo* t = ckpt->Find(StoredLlamaName(m->config_, "model.embed_tokens.weight"))) {
    stored = std::string(DTypeName(t->dtype));
  }
  m->stored_dtype_ = stored;
  // Experts stored as 3-D tensors (as released; save_pretrained writes them
  // one by one).
  const LlamaArchitecture& arch = m->config_.arch();
  if (arch.moe_packed_gate_up != nullptr && m->config_.experts > 0) {
    int first = 0;
    while (first + 1 < m->config_.n_layer && !m->config_.sparse(first)) ++first;
    m->config_.experts_packed =
        ckpt->Find(StoredLlamaName(m->config_, absl::StrCat("model.layers.", first, ".", arch.moe_packed_gate_up))) !=
        nullptr;
  }
  m->source_ = std::make_unique<CheckpointSource>(std::move(*ckpt), "", stored);
  if (m->config_.experts_packed || arch.shared_fused_up != nullptr) {
    m->source_ = std::make_unique<SlicedSource>(
        std::move(m->source_),
        [c = m->config_](absl::string_view name, SlicedSource::Slice* out) { return LocatePacked(c, name, out); });
  }
  if (arch.checkpoint_source != nullptr) m->source_ = arch.checkpoint_source(std::move(m->source_), m->config_);
  if (m->config_.text_prefix != "model." || !m->config_.arch().renames.empty() || m->config_.mtp_layers > 0) {
    m->source_ = std::make_unique<RenamedSource>(
        std::move(m->source_), [c = m->config_](absl::string_view name) { return StoredLlamaName(c, name); });
  }
  // Every tensor there, with its shape, now; the data when a rank needs it.
  FLOVER_RETURN_IF_ERROR(m->CheckWeights());
  auto tokenizer = LoadDirectoryTokenizer(dir, m->config_.vocab_size, m->config_.architecture);
  if (!tokenizer.ok()) return tokenizer.status();
  auto eos = ResolveEosIds(dir, m->config_.eos_token_ids, tokenizer->get(), m->config_.vocab_size);
  if (!eos.ok()) return eos.status();
  m->config_.eos_token_ids = std::move(*eos);
  m->tokenizer_ = std::move(*tokenizer);
  auto chat = LoadDirectoryChatTemplate(dir);
  if (!chat.ok()) return chat.status();
  m->chat_template_ = std::move(*chat);
  m->info_ = InfoOf(m->config_);
  return m;
}

absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> LlamaCheckpoint::LoadGguf(const std::string& path) {
  auto opened = GgufFile::Open(path);
  if (!opened.ok()) return opened.status();
  auto file = std::make_shared<const GgufFile>(std::move(*opened));
  std::unique_ptr<LlamaCheckpoint> m(new LlamaCheckpoint());
  m->spec_ = path;
  auto config = LlamaConfigFromGguf(*file);
  if (!config.ok()) return config.status();
  m->config_ = std::move(*config);
  auto text = ReadGgufText(*file, m->config_.vocab_size);
  if (!text.ok()) return text.status();
  m->config_.eos_token_ids = text->eos_ids;
  m->config_.bos_token_id = text->bos_id;
  m->stored_dtype_ = GgufStoredType(*file);
  m->source_ = GgufLlamaSource(file, m->config_);
  // Every tensor there, with its shape, now; the data when a rank needs it.
  FLOVER_RETURN_IF_ERROR(m->CheckWeights());
  m->tokenizer_ = text->tokenizer;
  m->chat_template_.text = text->chat_template;
  m->chat_template_.source = path + ": tokenizer.chat_template";
  if (text->tokenizer != nullptr) {
    if (text->bos_id >= 0) m->chat_template_.bos_token = text->tokenizer->Decode({text->bos_id});
    if (!text->eos_ids.empty()) {
      m->chat_template_.eos_token = text->tokenizer->Decode({text->eos_ids[0]});
    }
  }
  m->info_ = InfoOf(m->config_);
  return m;
}

void LlamaCheckpoint::ServeContext(int positions) {
  ServeLlamaContext(&config_, positions);
  info_.max_positions = config_.max_positions;
}

absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> LlamaCheckpoint::Load(absl::string_view spec) {
  constexpr absl::string_view kBuiltin = "builtin:";
  if (absl::StartsWith(spec, kBuiltin)) return Builtin(spec.substr(kBuiltin.size()));
  if (absl::EndsWith(spec, ".gguf")) return LoadGguf(std::string(spec));
  return LoadDirectory(std::string(spec));
}

}  // namespace flover
