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

// ---- The grouping on a device: the same groups, in phases ------------------
//
// A device groups the routes without their ids leaving it, in three phases
// with a barrier between each (one thread block: CUDA's GroupExpertsKernel):
// each route counts into its group; one thread turns the counts into group
// offsets and tiles (ExpertOffsets); then each group places its own routes in
// route order (PlaceGroup). The groups are GroupByExpert's, plus one more,
// group E, for routes whose id is out of range (ExpertOf), which a device
// cannot refuse without the ids coming down: its tiles give zero rows.
// Written once for the host and the device, so the CPU's tests check them
// against GroupByExpert.

// A tile of grouped routes: rows [row, row + rows) of the grouped order, all
// of group `expert` (E: ids out of range). A tile with rows == 0 is unused.
struct ExpertTile {
  int32_t row, rows, expert;
};

// Group of id: the id itself when it is an expert, E otherwise.
FLOVER_HOST_DEVICE inline int ExpertOf(int32_t id, int E) { return id >= 0 && id < E ? id : E; }

// Tiles of at most `tile_rows` routes that the grouping of `R` routes over
// E experts can need: each of its at most min(R, E + 1) non-empty groups
// leaves less than one tile part-filled.
FLOVER_HOST_DEVICE inline int64_t ExpertTileBound(int64_t R, int E, int tile_rows) {
  const int64_t groups = R < E + 1 ? R : E + 1;
  return (R + tile_rows - 1) / tile_rows + groups;
}

// counts[g], g = 0..E (group E: ids out of range) -> begin[0..E + 1] (group
// g's routes are grouped rows [begin[g], begin[g + 1])) and the tiles of
// every group in group order, each group cut into tiles of `tile_rows` from
// its start; the tiles past them up to `tile_bound` are unused ({0, 0, E}).
FLOVER_HOST_DEVICE inline void ExpertOffsets(const int32_t* counts, int E, int tile_rows, int64_t tile_bound,
                                             int32_t* begin, ExpertTile* tiles) {
  begin[0] = 0;
  int64_t t = 0;
  for (int g = 0; g <= E; ++g) {
    begin[g + 1] = begin[g] + counts[g];
    for (int32_t r = begin[g]; r < begin[g + 1] && t < tile_bound; r += tile_rows) {
      const int32_t left = begin[g + 1] - r;
      tiles[t++] = ExpertTile{r, left < tile_rows ? left : tile_rows, g};
    }
  }
  for (; t < tile_bound; ++t) tiles[t] = ExpertTile{0, 0, E};
}

// Group g's routes, in route order, into routes[first, ...).
FLOVER_HOST_DEVICE inline void PlaceGroup(const int32_t* ids, int64_t R, int E, int g, int32_t first,
                                          int32_t* routes) {
  int32_t at = first;
  for (int64_t r = 0; r < R; ++r) {
    if (ExpertOf(ids[r], E) == g) routes[at++] = static_cast<int32_t>(r);
  }
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
