#include "model/gpt2/gpt_weights.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "model/host_matrix.h"
#include "util/split_mix64.h"

namespace flover {
namespace {

class Reader {
 public:
  Reader(const SafetensorsFile& file) : file_(file) {
    // Hugging Face saves GPT2LMHeadModel with the prefix, GPT2Model without.
    prefix_ = file.Find("transformer.wte.weight") != nullptr ? "transformer." : "";
  }

  absl::Status Read(const std::string& key, std::vector<int64_t> shape,
                    std::vector<float>* out) {
    auto t = file_.ReadFloat(prefix_ + key, shape);
    if (!t.ok()) return t.status();
    *out = std::move(*t);
    return absl::OkStatus();
  }

 private:
  const SafetensorsFile& file_;
  std::string prefix_;
};

std::vector<float> Filled(int64_t n, float value) { return std::vector<float>(n, value); }

}  // namespace

absl::StatusOr<GptWeights> LoadGptWeights(const SafetensorsFile& file,
                                          const GptConfig& config) {
  const int64_t C = config.n_embd, F = config.n_inner, V = config.vocab_size,
                P = config.n_positions;
  Reader r(file);
  GptWeights w;
  absl::Status st;
  auto read = [&](const std::string& key, std::vector<int64_t> shape, std::vector<float>* out) {
    if (st.ok()) st = r.Read(key, std::move(shape), out);
  };
  read("wte.weight", {V, C}, &w.wte);
  read("wpe.weight", {P, C}, &w.wpe);
  w.layers.resize(config.n_layer);
  for (int i = 0; i < config.n_layer; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string h = absl::StrCat("h.", i, ".");
    read(h + "ln_1.weight", {C}, &l.ln_1_g);
    read(h + "ln_1.bias", {C}, &l.ln_1_b);
    read(h + "attn.c_attn.weight", {C, 3 * C}, &l.attn_w);
    read(h + "attn.c_attn.bias", {3 * C}, &l.attn_b);
    read(h + "attn.c_proj.weight", {C, C}, &l.attn_proj_w);
    read(h + "attn.c_proj.bias", {C}, &l.attn_proj_b);
    read(h + "ln_2.weight", {C}, &l.ln_2_g);
    read(h + "ln_2.bias", {C}, &l.ln_2_b);
    read(h + "mlp.c_fc.weight", {C, F}, &l.fc_w);
    read(h + "mlp.c_fc.bias", {F}, &l.fc_b);
    read(h + "mlp.c_proj.weight", {F, C}, &l.mlp_proj_w);
    read(h + "mlp.c_proj.bias", {C}, &l.mlp_proj_b);
  }
  read("ln_f.weight", {C}, &w.ln_f_g);
  read("ln_f.bias", {C}, &w.ln_f_b);
  if (!st.ok()) return st;
  // lm_head is saved only when it is not tied to wte; it never has the prefix.
  if (file.Find("lm_head.weight") != nullptr) {
    auto head = file.ReadFloat("lm_head.weight", {V, C});
    if (!head.ok()) return head.status();
    w.lm_head = std::move(*head);
  }
  return w;
}

GptWeights RandomGptWeights(const GptConfig& config, uint64_t seed) {
  const int64_t C = config.n_embd, F = config.n_inner;
  SplitMix64 rng(seed);
  GptWeights w;
  w.wte = RandomInit(int64_t{config.vocab_size} * C, rng);
  w.wpe = RandomInit(int64_t{config.n_positions} * C, rng);
  w.layers.resize(config.n_layer);
  for (LayerWeights& l : w.layers) {
    l.ln_1_g = Filled(C, 1.0f);
    l.ln_1_b = Filled(C, 0.0f);
    l.attn_w = RandomInit(C * 3 * C, rng);
    l.attn_b = Filled(3 * C, 0.0f);
    l.attn_proj_w = RandomInit(C * C, rng);
    l.attn_proj_b = Filled(C, 0.0f);
    l.ln_2_g = Filled(C, 1.0f);
    l.ln_2_b = Filled(C, 0.0f);
    l.fc_w = RandomInit(C * F, rng);
    l.fc_b = Filled(F, 0.0f);
    l.mlp_proj_w = RandomInit(F * C, rng);
    l.mlp_proj_b = Filled(C, 0.0f);
  }
  w.ln_f_g = Filled(C, 1.0f);
  w.ln_f_b = Filled(C, 0.0f);
  return w;
}

}  // namespace flover
