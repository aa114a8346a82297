// A model's shape as the engine, the server and clients see it, whatever
// its family.
#ifndef FLOVER_MODEL_MODEL_INFO_H_
#define FLOVER_MODEL_MODEL_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

namespace flover {

// A model's shape, as clients and the scheduler see it.
struct ModelInfo {
  std::string architecture;  // "gpt2", ...
  int n_layer = 0;
  int n_head = 0;      // query heads
  int n_kv_head = 0;   // key/value heads (= n_head without grouped-query attention)
  int hidden = 0;      // the residual stream's width
  // A mixture of experts: each sparse layer's experts and how many a token
  // goes through (0 for a dense model).
  int experts = 0;
  int experts_per_token = 0;
  int vocab_size = 0;
  int max_positions = 0;
  // Tokens that end a sequence unless a request ignores EOS (some models
  // have several; none is allowed).
  std::vector<int32_t> eos_token_ids;
  int64_t num_parameters = 0;
  // Weights a token goes through in matrix products (the LM head included,
  // a learned position table not): 2x this is a token's GEMM FLOPs.
  int64_t matmul_parameters = 0;

  bool IsEos(int32_t token) const;
};

}  // namespace flover

#endif  // FLOVER_MODEL_MODEL_INFO_H_
