// The routes of a LinearById call grouped by expert, worked out on the host
// by every backend the same way: route r = t * k + j (row t's j-th choice)
// of ids: i32 [T, k]. A group's routes stay in route order, so each expert's
// Linear sees its rows in a fixed order.
#ifndef FLOVER_KERNELS_EXPERT_GROUPS_H_
#define FLOVER_KERNELS_EXPERT_GROUPS_H_

#include <cstdint>
#include <vector>

#include "kernels/op_params.h"

#if defined(__CUDACC__)
#define FLOVER_HOST_DEVICE __host__ __device__
#else
#define FLOVER_HOST_DEVICE
#endif

namespace flover::kernels {

struct ExpertGroups {
  std::vector<int32_t> routes;  // every route, expert 0's first
  std::vector<int32_t> begin;   // expert e's routes: routes[begin[e], begin[e + 1])
};

// `ids` holds `num_routes` experts, each in [0, num_experts).
inline ExpertGroups GroupByExpert(const int32_t* ids, int64_t num_routes, int num_experts) {
  ExpertGroups g;
  g.begin.assign(num_experts + 1, 0);
  for (int64_t r = 0; r < num_routes; ++r) ++g.begin[ids[r] + 1];
  for (int e = 0; e < num_experts; ++e) g.begin[e + 1] += g.begin[e];
  g.routes.resize(num_routes);
  std::vector<int32_t> next(g.begin.begin(), g.begin.end() - 1);
  for (int64_t r = 0; r < num_routes; ++r) g.routes[next[ids[r]]++] = static_cast<int32_t>(r);
  return g;
}

// One row's routing (RouterParams) over logits[0, E): the k experts of
// largest score, in decreasing order, the lower id first among equals, and
// their weights. Written once, for the host and the CUDA kernel alike
// (`exp_fn`: the exponential each has).
template <typename Exp>
FLOVER_HOST_DEVICE inline void RouteRow(const float* logits, int E, const RouterParams& p, int32_t* ids,
                                        float* weights, Exp exp_fn) {
  float mx = logits[0];
  for (int e = 1; e < E; ++e) mx = logits[e] > mx ? logits[e] : mx;
  // Top k by logit (softmax keeps the order), the lower id among equals.
  for (int j = 0; j < p.k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ids[j] = best;
  }
  if (p.scoring == RouterParams::Scoring::kSoftmaxTopK) {
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += exp_fn(logits[e] - mx);
    float chosen = 0.0f;
    for (int j = 0; j < p.k; ++j) {
      weights[j] = exp_fn(logits[ids[j]] - mx) / sum;
      chosen += weights[j];
    }
    if (p.renormalize) {
      for (int j = 0; j < p.k; ++j) weights[j] /= chosen;
    }
  } else {
    const float top = logits[ids[0]];
    float sum = 0.0f;
    for (int j = 0; j < p.k; ++j) sum += exp_fn(logits[ids[j]] - top);
    for (int j = 0; j < p.k; ++j) weights[j] = exp_fn(logits[ids[j]] - top) / sum;
  }
  if (p.expert_scale != nullptr) {
    for (int j = 0; j < p.k; ++j) weights[j] *= p.expert_scale[ids[j]];
  }
}

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_EXPERT_GROUPS_H_
