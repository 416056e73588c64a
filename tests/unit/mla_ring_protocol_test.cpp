// The narrow MLA tile's block ring (mla_hopper_narrow_ring.cuh) model-checked on the CPU: the
// schedule functions the kernel calls (mla_params.cuh) drive a producer, loads that land in
// any order and two math warpgroups taking alternate tiles, interleaved at random. No wait
// may pass before its block has landed, no slot may be refilled while it is read, and the
// run must never stall. The one-barrier-a-slot scheme is caught by the same check.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "mla/mla_params.cuh"

namespace attnjit {
namespace {

// An mbarrier as the kernel uses it: its phase completes after `count` arrivals (a TMA
// fill's completes when its bytes land). A parity wait passes once the phase of that
// parity has completed: a fresh barrier counts its phase "1" as complete.
struct Barrier {
  int count = 1, pending = 1, completed = 0;
  void arrive() {
    if (--pending == 0) {
      ++completed;
      pending = count;
    }
  }
  bool passes(unsigned parity) const { return unsigned(completed & 1) != parity; }
};

struct Verdict {
  bool ok = true;
  std::string why;
};

// One run: `tiles` tiles through `slots` slots; two_barriers false: one full barrier a
// slot, phase fill % 2 (the scheme the ring must not use).
Verdict run_ring(int slots, int tiles, bool two_barriers, std::mt19937& rng) {
  const int blocks = 9 * tiles;
  std::vector<Barrier> full(2 * slots), empty(slots);
  for (Barrier& b : empty) b.count = b.pending = 4;  // the consuming warpgroup's four warps
  std::vector<int> data(slots, -1);                  // the block a slot holds (once landed)
  std::vector<int> in_flight;                        // issued fills, not yet landed
  std::vector<bool> released(blocks, false);
  auto full_index = [&](int g) { return two_barriers ? mla_ring_full_index(g, slots) : g % slots; };
  auto full_parity = [&](int g) {
    return two_barriers ? mla_ring_full_parity(g, slots) : unsigned(g / slots) & 1u;
  };
  int next_fill = 0;
  // A warpgroup's position: tile it, step 0-8 (waiting for block cb), 9 (S done: release
  // the rope block), 10 (first P V group: blocks 0-3), 11 (blocks 4-7).
  struct Math {
    int it, step = 0;
  } wg[2] = {{0}, {1}};
  Verdict v;
  auto fail = [&](std::string why) {
    v.ok = false;
    v.why = std::move(why);
  };
  auto release = [&](int g) {
    if (data[g % slots] != g) return fail("block " + std::to_string(g) + " was overwritten while read");
    released[g] = true;
    for (int w = 0; w < 4; ++w) empty[g % slots].arrive();
  };
  while (v.ok) {
    std::vector<int> ready;  // 0: the producer, 1: a landing, 2 + w: warpgroup w
    if (next_fill < blocks &&
        (next_fill < slots || empty[next_fill % slots].passes(mla_ring_empty_parity(next_fill, slots))))
      ready.push_back(0);
    if (!in_flight.empty()) ready.push_back(1);
    for (int w = 0; w < 2; ++w) {
      const Math& m = wg[w];
      if (m.it >= tiles) continue;
      if (m.step >= 9 || full[full_index(9 * m.it + m.step)].passes(full_parity(9 * m.it + m.step)))
        ready.push_back(2 + w);
    }
    if (ready.empty()) {
      if (next_fill < blocks || wg[0].it < tiles || wg[1].it < tiles) fail("stalled");
      break;
    }
    const int actor = ready[rng() % ready.size()];
    if (actor == 0) {
      const int g = next_fill++;
      if (g >= slots && !released[g - slots]) fail("slot refilled before its release");
      in_flight.push_back(g);
    } else if (actor == 1) {
      const size_t k = rng() % in_flight.size();
      const int g = in_flight[k];
      in_flight.erase(in_flight.begin() + static_cast<long>(k));
      data[g % slots] = g;
      full[full_index(g)].arrive();  // the bytes landed
    } else {
      Math& m = wg[actor - 2];
      const int g0 = 9 * m.it;
      if (m.step < 9) {
        if (data[(g0 + m.step) % slots] != g0 + m.step)
          fail("a wait for block " + std::to_string(g0 + m.step) + " passed before it landed");
        ++m.step;
      } else if (m.step == 9) {
        release(g0 + 8);
        ++m.step;
      } else if (m.step == 10) {
        for (int cb = 0; cb < 4; ++cb) release(g0 + cb);
        ++m.step;
      } else {
        for (int cb = 4; cb < 8; ++cb) release(g0 + cb);
        m.it += 2;
        m.step = 0;
      }
    }
  }
  return v;
}

TEST(MlaRingProtocol, TheKernelsSlotCounts) {
  EXPECT_EQ(mla_ring_slots(16, 2), 25);
  EXPECT_EQ(mla_ring_slots(32, 2), 22);
  EXPECT_EQ(mla_ring_slots(16, 1), 50);  // fp8 KV: 4 KB blocks
  for (int kv_bytes : {1, 2})
    for (int rows : {16, 32}) {
      EXPECT_LE(mla_ring_smem_bytes(rows, kv_bytes), mla_const::kHopperSmemLimit);
      // no slot left unused
      EXPECT_GT(mla_ring_smem_bytes(rows, kv_bytes) + mla_ring_block_bytes(kv_bytes) + 24, mla_const::kHopperSmemLimit);
    }
}

TEST(MlaRingProtocol, NoWaitPassesEarlyAndNoneStalls) {
  std::mt19937 rng(2531);
  int runs = 0;
  for (int slots : {mla_ring_slots(16, 2), mla_ring_slots(32, 2), mla_ring_slots(16, 1), 18})
    for (int tiles : {1, 2, 3, 5, 8, 13, 40})
      for (int rep = 0; rep < 60; ++rep, ++runs) {
        const Verdict v = run_ring(slots, tiles, true, rng);
        ASSERT_TRUE(v.ok) << v.why << " (slots " << slots << ", tiles " << tiles << ", run " << rep << ")";
      }
  EXPECT_EQ(runs, 4 * 7 * 60);
}

// The check has teeth: with one full barrier a slot some interleaving lets a warpgroup pass
// on the phase of the slot's fill before last.
TEST(MlaRingProtocol, OneBarrierASlotIsCaught) {
  std::mt19937 rng(77);
  int caught = 0;
  for (int rep = 0; rep < 400; ++rep) caught += !run_ring(mla_ring_slots(16, 2), 12, false, rng).ok;
  EXPECT_GT(caught, 0);
}

}  // namespace
}  // namespace attnjit
