// A model as read from disk (or generated, for the built-ins), before it is
// on a backend: its description, its tokenizer, and a way to put this rank's
// part of it on a backend. Each family (model/gpt2, ...) implements it;
// model_loader picks the family.
#ifndef FLOVER_MODEL_LOADED_MODEL_H_
#define FLOVER_MODEL_LOADED_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/collectives.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/loader/chat_template_info.h"
#include "model/model_info.h"
#include "tokenizer/tokenizer.h"

namespace flover {

class LoadedModel {
 public:
  virtual ~LoadedModel() = default;

  const std::string& spec() const { return spec_; }  // what was asked for
  // The weights' dtype on disk: "F32", "F16" or "BF16" ("F32" for built-ins),
  // or a GGUF file's block type ("Q4_K").
  const std::string& stored_dtype() const { return stored_dtype_; }
  const ModelInfo& info() const { return info_; }
  // The model's tokenizer, or null (token ids only). Shared, so it can
  // outlive this object once the weights are on a backend.
  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }
  const ChatTemplateInfo& chat_template() const { return chat_template_; }

  // Before Instantiate: the model is to serve sequences of up to
  // `positions` (the engine's max_seq_len). A model whose positional
  // encoding depends on the context it serves changes here, and info()
  // says what it then serves: a LongRoPE model (Phi-3.5, Phi-4-mini) takes
  // its long factors past its original context (LlamaConfig's
  // ServeLlamaContext). Others are unchanged; the engine refuses a
  // max_seq_len past info().max_positions.
  virtual void ServeContext(int /*positions*/) {}

  // OK when the model splits `tp` ways for tensor parallelism, else
  // InvalidArgument naming what does not divide.
  virtual absl::Status CheckTensorParallel(int tp) const = 0;

  // This rank's model on `backend`: the whole model, or, with collectives of
  // tp_size > 1, this rank's shard. The weights are copied to the backend;
  // this object may be dropped afterwards.
  virtual absl::StatusOr<std::unique_ptr<CausalLm>> Instantiate(
      kernels::Backend& backend, Collectives* collectives = nullptr) const = 0;

  // The model's multi-token-prediction layer (Qwen3.5's MTP: the drafter
  // of --speculative=mtp) as a model of its own, on the backend `main` runs
  // on and sharing main's embedding and head; `main` must be this model,
  // instantiated on one rank. FailedPrecondition where the model has none.
  virtual absl::StatusOr<std::unique_ptr<CausalLm>> InstantiateMtp(const CausalLm& /*main*/) const {
    return absl::FailedPreconditionError(spec_ + " has no multi-token-prediction layer");
  }

 protected:
  std::string spec_;
  std::string stored_dtype_ = "F32";
  ModelInfo info_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  ChatTemplateInfo chat_template_;
};

}  // namespace flover

#endif  // FLOVER_MODEL_LOADED_MODEL_H_
