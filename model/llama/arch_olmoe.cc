// OLMoE: Llama with one RMSNorm over all of Q and one over all of K (not
// per head) before rotary, and a mixture of experts in every layer:
// num_experts gated MLPs of width intermediate_size, num_experts_per_tok
// per token, weighted by the router's softmax (renormalised with
// norm_topk_prob, off by default). clip_qkv is refused. The norms across
// heads keep it to one tensor-parallel rank (DecoderSpec::qk_norm_whole).
#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& OlmoeArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "olmoe";
    a.gguf = true;
    a.moe = true;
    a.qk_norm = true;
    a.qk_norm_whole = true;
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
      if (auto it = s.fields().find("clip_qkv");
          it != s.fields().end() && it->second.kind_case() != google::protobuf::Value::kNullValue) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": clip_qkv is not supported"));
      }
      return ParseMoe(s, what, "num_experts", "intermediate_size", /*renormalize=*/false, c);
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
