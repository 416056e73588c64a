// The wide MLA tile's flat schedule (spec::feature::kFlat): the partition (MlaFlatSplit),
// a CPU replay of the kernel's walk (every tile once, whole requests written once, split ones'
// pieces in distinct slots that the last piece merges), which calls take it, its workspace.
// No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/mla.hpp"
#include "common/env_guard.hpp"
#include "common/op_args.hpp"
#include "mla/mla_params.cuh"
#include "ops/mla/mla_family.hpp"
#include "ops/mla/mla_plan.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {
namespace {

using testing::fake;
using testing::kPlanArch;

TEST(MlaFlat, FeatureBitMatchesTheKernel) { EXPECT_EQ(mla_const::kFeatFlat, spec::feature::kFlat); }

// bound() is increasing, starts at 0 and ends at total, parts differ by at most one unit, and
// part_of() inverts it at every unit (the kernel never divides past make()).
TEST(MlaFlat, PartsTileTheUnitsAndPartOfInvertsThem) {
  std::mt19937_64 rng(7);
  std::vector<std::pair<long long, int>> cases = {{1, 1}, {7, 7}, {8, 7}, {5, 66}, {132, 132}, {1000, 132}, {199, 66},
                                                  {65535, 65535}, {(1ll << 40) + 12345, 132}};
  for (int i = 0; i < 300; ++i) {
    const int parts = 1 + int(rng() % 200);
    cases.push_back({parts + (long long)(rng() % 100000), parts});
  }
  for (const auto& [total, parts] : cases) {
    const MlaFlatSplit f = MlaFlatSplit::make(total, parts);
    ASSERT_EQ(f.bound(0), 0);
    ASSERT_EQ(f.bound(parts), total) << total << " " << parts;
    for (int i = 0; i < parts; ++i) {
      const long long len = f.bound(i + 1) - f.bound(i);
      ASSERT_TRUE(len == total / parts || len == total / parts + 1) << total << " " << parts << " " << i;
      if (total <= 200000) {
        for (long long x = f.bound(i); x < f.bound(i + 1); ++x) ASSERT_EQ(f.part_of(x), i) << total << " " << parts << " " << x;
      } else {  // the ends of each part
        ASSERT_EQ(f.part_of(f.bound(i)), i);
        ASSERT_EQ(f.part_of(f.bound(i + 1) - 1), i);
      }
    }
  }
}

// What one CTA of part `part` does, replayed as the kernel walks: pieces (request, tiles
// [lo, hi), the request's first and last parts).
struct Piece {
  int b, lo, hi, pf, pl;
};
std::vector<Piece> walk(const std::vector<int>& tiles, int c, int part, int parts) {
  long long total = 0;
  for (int t : tiles) total += mla_flat_units(t, c);
  const MlaFlatSplit fs = MlaFlatSplit::make(total, parts);
  // The first request that ends past the part's start (the kernel's warp scan).
  int b = int(tiles.size());
  long long start = 0;
  for (int r = 0; r < int(tiles.size()); ++r) {
    if (start + mla_flat_units(tiles[r], c) > fs.bound(part)) {
      b = r;
      break;
    }
    start += mla_flat_units(tiles[r], c);
  }
  std::vector<Piece> out;
  for (;;) {
    const long long x1 = fs.bound(part + 1);
    long long first = 0;
    int lo = 0, hi = 0, units = 1;
    for (; b < int(tiles.size()) && start < x1; ++b) {
      units = mla_flat_units(tiles[b], 0);
      first = start + c;
      start += c + units;
      fs.piece(first, units, part, &lo, &hi);
      if (hi > lo) break;
    }
    if (hi <= lo) break;
    out.push_back({b, std::min(lo, tiles[b]), std::min(hi, tiles[b]), fs.part_of(first), fs.part_of(first + units - 1)});
    ++b;
  }
  return out;
}

TEST(MlaFlat, EveryTileOnceAndEverySplitRequestMergedOnce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int batch = 1 + int(rng() % (trial % 4 == 0 ? 300 : 40));
    const int c = 1 + int(rng() % 4);
    std::vector<int> tiles(batch);
    for (int& t : tiles) t = rng() % 5 == 0 ? int(rng() % 3) : int(rng() % (trial % 3 == 0 ? 600 : 80));
    const int parts = 1 + int(rng() % 140);  // more than the units at times: the last parts empty
    std::vector<std::vector<int>> seen(batch);
    for (int b = 0; b < batch; ++b) seen[b].assign(std::max(tiles[b], 1), 0);
    std::map<int, std::pair<int, int>> span;  // request -> (first, last) part of its pieces
    std::set<int> slots;                      // b + part of the split requests' pieces
    std::map<int, int> arrivals;
    for (int part = 0; part < parts; ++part) {
      int prev_b = -1;
      for (const Piece& p : walk(tiles, c, part, parts)) {
        ASSERT_GT(p.b, prev_b) << "a part meets each request once, in order";
        prev_b = p.b;
        ASSERT_LE(p.pf, part);
        ASSERT_GE(p.pl, part);
        if (tiles[p.b] == 0) {
          ASSERT_EQ(p.pf, p.pl) << "a request without keys is one piece";
          ++seen[p.b][0];
        }
        for (int t = p.lo; t < p.hi; ++t) ++seen[p.b][t];
        if (span.count(p.b)) ASSERT_EQ(span[p.b], std::make_pair(p.pf, p.pl));
        span[p.b] = {p.pf, p.pl};
        if (p.pf != p.pl) {
          ASSERT_TRUE(slots.insert(p.b + part).second) << "slot b + part is the piece's alone";
          ASSERT_LT(p.b + part, batch + parts);
          ++arrivals[p.b];
        }
      }
    }
    for (int b = 0; b < batch; ++b) {
      for (int t = 0; t < int(seen[b].size()); ++t) ASSERT_EQ(seen[b][t], 1) << "request " << b << " tile " << t;
      ASSERT_TRUE(span.count(b)) << "request " << b << " has no piece";
      const auto [pf, pl] = span[b];
      // The semaphore counts pl - pf + 1 arrivals: one piece in each part of the span.
      if (pf != pl) ASSERT_EQ(arrivals[b], pl - pf + 1) << "request " << b;
    }
  }
}

// valid_mla's dense call with `heads` heads, `batch` requests, max_seq_len `len`.
MlaArgs call(int heads, int batch, int len, DType kv = DType::kBFloat16) {
  MlaArgs a = testing::valid_mla(false);
  a.block_tables = TensorView::contiguous(fake(0x300000), DType::kInt32, {batch, len / testing::kMlaPage});
  a.seq_lens = TensorView::contiguous(fake(0x200000), DType::kInt32, {batch});
  a.max_seq_len = len;
  a.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {batch, 1, heads, 576});
  a.out = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {batch, 1, heads, 512});
  a.kv_cache = TensorView::contiguous(fake(0x100000), kv, {a.kv_cache.shape[0], a.kv_cache.shape[1], 576});
  return a;
}

TEST(MlaFlat, TakenUnderTheKnobByTheDenseWideTileOnly) {
  EXPECT_FALSE(plan_mla(call(128, 64, 8192), kPlanArch).spec.has(spec::feature::kFlat)) << "off by default";
  testing::EnvGuard on("ATTNJIT_MLA_FLAT", "1");
  const MlaPlan wide = plan_mla(call(128, 64, 8192), kPlanArch);
  EXPECT_TRUE(wide.spec.has(spec::feature::kFlat));
  EXPECT_EQ(wide.spec.name(), "mla.bf16.hd576x512.g1.p64.nhd.causal.flat.trtllmgen.sm90a");
  EXPECT_TRUE(plan_mla(call(128, 64, 8192, DType::kFloat8E4M3), kPlanArch).spec.has(spec::feature::kFlat));
  EXPECT_FALSE(plan_mla(call(16, 64, 8192), kPlanArch).spec.has(spec::feature::kFlat)) << "the narrow tile";
  MlaArgs xqa = call(128, 64, 8192);
  xqa.backend = Backend::kXqa;
  EXPECT_FALSE(plan_mla(xqa, kPlanArch).spec.has(spec::feature::kFlat));
  MlaArgs sparse = testing::valid_mla(true);
  const int64_t b = sparse.query.shape[0];
  sparse.query = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {b, 1, 128, 576});
  sparse.out = TensorView::contiguous(fake(0x400000), DType::kBFloat16, {b, 1, 128, 512});
  sparse.indices = TensorView::contiguous(fake(0x500000), DType::kInt32, {b, 1, sparse.indices.shape[2]});
  EXPECT_EQ(plan_mla(sparse, kPlanArch).shape.rows_per_cta, mla_const::kHopperRows);
  EXPECT_FALSE(plan_mla(sparse, kPlanArch).spec.has(spec::feature::kFlat)) << "sparse";
  testing::EnvGuard off("ATTNJIT_MLA_FLAT", "0");
  EXPECT_FALSE(plan_mla(call(128, 64, 8192), kPlanArch).spec.has(spec::feature::kFlat));
}

TEST(MlaFlat, RefusedOutsideTheWideDenseTile) {
  for (const char* name : {"mla.bf16.hd576x512.g1.p64.nhd.custom.flat.trtllmgen.sm90a",
                           "mla.bf16.hd576x512.g1.p64.nhd.causal.narrow.flat.trtllmgen.sm90a",
                           "mla.bf16.hd576x512.g1.p64.nhd.causal.flat.sm90a"}) {
    const spec::KernelSpec s = spec::KernelSpec::from_name(name);
    std::string why;
    EXPECT_FALSE(mla_can_implement(s, s.arch, &why)) << name;
    EXPECT_NE(why.find("flat"), std::string::npos) << name << ": " << why;
  }
  for (const char* name : {"mla.bf16.hd576x512.g1.p64.nhd.causal.flat.trtllmgen.sm90a",
                           "mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.flat.trtllmgen.sm90a",
                           "mla.bf16.hd576x512.g1.p64.nhd.causal.tile32.flat.trtllmgen.sm90a"}) {
    const spec::KernelSpec s = spec::KernelSpec::from_name(name);
    std::string why;
    EXPECT_TRUE(mla_can_implement(s, s.arch, &why)) << name << ": " << why;
  }
}

// mla_workspace_bytes (what callers allocate) holds the flat launch's parts wherever the
// batch is at least the parts a row block spans and a request may split (>= 256 tokens);
// below that the parts shrink to what fits, and with no room for one (0 bytes where nothing
// splits) the launch takes the split schedule's kernel instead.
TEST(MlaFlat, PartsFitTheWorkspaceThatMlaWorkspaceBytesSizes) {
  for (int heads : {33, 64, 128})
    for (int q_len : {1, 2, 4})
      for (int batch : {1, 2, 7, 16, 33, 64, 128, 1000})
        for (int len : {64, 256, 1024, 8192}) {
          const MlaShape s{batch, heads, q_len, len, false, mla_const::kHopperRows, mla_const::kHopperTile};
          const int slots = 132;
          const size_t ws = mla_workspace_bytes(batch, heads, q_len, len, slots);
          const int parts = mla_flat_parts(s, slots, ws);
          const int y = mla_row_blocks(s);
          if (batch >= slots / y && len >= 256)
            EXPECT_EQ(parts, std::max(1, slots / y));
          if (parts >= 1) EXPECT_LE(mla_flat_workspace_need(s, parts), ws);
          EXPECT_GE(parts, ws >= mla_flat_workspace_need(s, 1) ? 1 : 0);
        }
}

}  // namespace
}  // namespace attnjit::ops
