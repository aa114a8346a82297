// The device's grouping phases (ExpertOffsets, PlaceGroup; CUDA's
// GroupExpertsKernel runs them) give GroupByExpert's groups, run here as the
// device runs them, phase by phase, and their tiles cover every grouped row
// once, each tile inside one group.
#include "kernels/expert_groups.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace flover::kernels {
namespace {

struct DeviceGroups {
  std::vector<int32_t> begin, routes;
  std::vector<ExpertTile> tiles;
};

// The kernel's phases in order: counts, then offsets and tiles, then each
// group's routes.
DeviceGroups RunPhases(const std::vector<int32_t>& ids, int E, int tile_rows) {
  const int64_t R = static_cast<int64_t>(ids.size());
  std::vector<int32_t> counts(E + 1, 0);
  for (int32_t id : ids) ++counts[ExpertOf(id, E)];
  DeviceGroups d;
  d.begin.resize(E + 2);
  d.tiles.resize(ExpertTileBound(R, E, tile_rows));
  ExpertOffsets(counts.data(), E, tile_rows, static_cast<int64_t>(d.tiles.size()), d.begin.data(), d.tiles.data());
  d.routes.assign(R, -1);
  for (int g = 0; g <= E; ++g) PlaceGroup(ids.data(), R, E, g, d.begin[g], d.routes.data());
  return d;
}

void ExpectTilesCoverGroups(const DeviceGroups& d, int E, int tile_rows) {
  const int32_t R = d.begin[E + 1];
  int32_t next = 0;
  size_t used = 0;
  for (const ExpertTile& t : d.tiles) {
    if (t.rows == 0) {
      EXPECT_EQ(t.expert, E);
      continue;
    }
    ++used;
    EXPECT_EQ(t.row, next) << "tiles are in grouped order, with no gap";
    EXPECT_LE(t.rows, tile_rows);
    ASSERT_GE(t.expert, 0);
    ASSERT_LE(t.expert, E);
    EXPECT_GE(t.row, d.begin[t.expert]);
    EXPECT_LE(t.row + t.rows, d.begin[t.expert + 1]) << "a tile stays inside its group";
    next = t.row + t.rows;
  }
  EXPECT_EQ(next, R) << "the tiles cover every grouped row";
  size_t want = 0;
  for (int g = 0; g <= E; ++g) want += (d.begin[g + 1] - d.begin[g] + tile_rows - 1) / tile_rows;
  EXPECT_EQ(used, want);
}

TEST(ExpertGroupsTest, DevicePhasesGiveGroupByExpertsGroups) {
  std::mt19937 rng(7);
  for (int E : {1, 4, 64, 128}) {
    for (int64_t R : {1, 2, 8, 17, 256, 2048}) {
      for (int tile_rows : {16, 32, 64}) {
        std::uniform_int_distribution<int32_t> pick(0, E - 1);
        std::vector<int32_t> ids(R);
        // Skewed: half the routes to expert 0, so some groups span tiles.
        for (int32_t& id : ids) id = rng() % 2 == 0 ? 0 : pick(rng);
        const ExpertGroups host = GroupByExpert(ids.data(), R, E);
        const DeviceGroups d = RunPhases(ids, E, tile_rows);
        EXPECT_EQ(d.routes, host.routes) << "E " << E << " R " << R;
        EXPECT_EQ(std::vector<int32_t>(d.begin.begin(), d.begin.end() - 1), host.begin);
        EXPECT_EQ(d.begin[E], d.begin[E + 1]) << "no route out of range";
        ExpectTilesCoverGroups(d, E, tile_rows);
      }
    }
  }
}

// Routes whose id is not an expert form group E, last, in route order.
TEST(ExpertGroupsTest, IdsOutOfRangeGoLastInTheirOwnGroup) {
  const int E = 4;
  const std::vector<int32_t> ids = {2, 4, 0, -1, 2, 9, 3, 0};
  const DeviceGroups d = RunPhases(ids, E, 16);
  EXPECT_EQ(d.routes, (std::vector<int32_t>{2, 7, 0, 4, 6, 1, 3, 5}));
  EXPECT_EQ(d.begin, (std::vector<int32_t>{0, 2, 2, 4, 5, 8}));
  ExpectTilesCoverGroups(d, E, 16);
  // Five routes in five groups (one out of range): five tiles used, of a
  // bound of six.
  const std::vector<int32_t> spread = {0, 1, 2, 3, 7};
  const DeviceGroups s = RunPhases(spread, E, 16);
  EXPECT_EQ(s.tiles.size(), 6u);
  ExpectTilesCoverGroups(s, E, 16);
}

}  // namespace
}  // namespace flover::kernels
