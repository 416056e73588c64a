// The wgmma MLA kernel's wide tile under the flat schedule (spec::feature::kFlat, off by
// default: docs/PERFORMANCE.md, thirty-seventh session). The tile's work item, loops and
// epilogue are MlaHopperLoop's (mla_hopper.cuh); this file walks the parts: part blockIdx.y
// takes an equal share of the batch's tiles laid end to end (MlaFlatSplit, mla_params.cuh),
// a piece of each request it meets, for row block blockIdx.x.
#pragma once

#include "common/softmax.cuh"
#include "mla/mla_params.cuh"

namespace attnjit {

template <class Loop>
struct MlaHopperFlat {
  using Tr = typename Loop::Traits;
  using Work = typename Loop::Work;
  using Smem = typename Loop::Smem;
  using Io = typename Loop::Io;
  using Out = typename Loop::Out;
  static constexpr int DV = Loop::DV, kTile = Loop::kTile;

  // The last piece of a split request: its own O, m and l still in registers, the other
  // pieces' partials (n of them from base, its own at `own`) folded in, rows as
  // Loop::write_partial wrote them; every load of a piece issued before its use (a merge by
  // MlaEpilogue::merge's loop, a few dependent L2 round trips a run of columns, cost ~30 us).
  __device__ __forceinline__ static void merge_pieces(const float* base, int n, int own, float (&o)[128], float (&m)[2],
                                                      float (&l_tot)[2]) {
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    const int r0 = warp * 16 + (lane >> 2), c0 = wg * (DV / 2) + (lane & 3) * 2;
    float m_tot[2] = {m[0], m[1]};
    for (int k = 0; k < n; ++k)
      if (k != own)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
          m_tot[hf] = fmaxf(m_tot[hf], __ldcg(base + (long long)k * Out::kPartialFloats + Tr::kRows * DV + r0 + 8 * hf));
    float w[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      w[hf] = merge_weight(m[hf], m_tot[hf]);
      l_tot[hf] *= w[hf];
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= w[(i % 4) / 2];
    for (int k = 0; k < n; ++k) {
      if (k == own) continue;
      const float* part = base + (long long)k * Out::kPartialFloats;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        w[hf] = merge_weight(__ldcg(part + Tr::kRows * DV + r0 + 8 * hf), m_tot[hf]);
        l_tot[hf] += w[hf] * __ldcg(part + Tr::kRows * DV + Tr::kRows + r0 + 8 * hf);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // 32 float2 loads in flight, then their FMAs
        float2 v[16][2];
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf)
            v[j][hf] = __ldcg(reinterpret_cast<const float2*>(part + (r0 + 8 * hf) * DV + c0 + (half * 16 + j) * 8));
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int i = 4 * (half * 16 + j) + 2 * hf;
            o[i] = fmaf(w[hf], v[j][hf].x, o[i]);
            o[i + 1] = fmaf(w[hf], v[j][hf].y, o[i + 1]);
          }
      }
    }
    m[0] = m_tot[0];
    m[1] = m_tot[1];
  }

  // A request's tiles (its dense range in kTile units).
  __device__ static int request_tiles(const MlaParams& p, int b, int& seq_len, int& range) {
    seq_len = __ldg(p.seq_lens + b);
    range = mla_dense_range(p, seq_len, Tr::kPageSize);
    return (range + kTile - 1) / kTile;
  }

  // The flat walk's state, in the split flag's bytes (sm.flag + 2): read by every thread at
  // a piece's start, so that none of it stays in registers through the piece's loops.
  struct FlatState {
    long long start;  // the next request's first unit
    long long total;  // the batch's units
    int b;            // the next request
    int pf, pl;       // the current piece's request: its first and last parts
    unsigned phase;   // Work::phase after the pieces so far
  };

  // The schedule (dense KV): part blockIdx.y walks its share of the batch's
  // units (MlaFlatSplit), a piece of each request it meets, row block blockIdx.x (the row
  // blocks of a part adjacent in launch order, as in the split schedule, so that they meet
  // each tile in L2 together). A request
  // within one part is written whole; a split one's pieces go to slots b + part, merged by
  // the piece that arrives last.
  __device__ __forceinline__ static void run(const MlaParams& p, const Smem& sm) {
    const int lane = threadIdx.x % 32, part = blockIdx.y, parts = gridDim.y, c = p.flat_overhead;
    FlatState* st = reinterpret_cast<FlatState*>(sm.flag + 2);
    int seq_len, range;
    // Request b0 + lane's units (0 past the batch).
    auto lane_units = [&](int b0) {
      return b0 + lane < p.batch ? mla_flat_units(request_tiles(p, b0 + lane, seq_len, range), c) : 0;
    };
    {
      // Every warp alike: the total, then the first request that ends past this part's start.
      long long total = 0;
      for (int b0 = 0; b0 < p.batch; b0 += 32) {
        int u = lane_units(b0);
#pragma unroll
        for (int off = 16; off > 0; off /= 2) u += __shfl_xor_sync(0xffffffffu, u, off);
        total += u;
      }
      const long long x0 = MlaFlatSplit::make(total, parts).bound(part);
      int b = p.batch;
      long long start = 0;
      for (int b0 = 0; b0 < p.batch; b0 += 32) {
        const int u = lane_units(b0);
        int incl = u;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
          const int v = __shfl_up_sync(0xffffffffu, incl, off);
          if (lane >= off) incl += v;
        }
        const unsigned past = __ballot_sync(0xffffffffu, u > 0 && start + incl > x0);
        if (past != 0u) {
          const int l0 = __ffs(past) - 1;
          b = b0 + l0;
          start += __shfl_sync(0xffffffffu, incl - u, l0);
          break;
        }
        start += __shfl_sync(0xffffffffu, incl, 31);
      }
      if (threadIdx.x == 0) {
        st->start = start;
        st->total = total;
        st->b = b;
        st->phase = 0u;
      }
      __syncthreads();
    }
    for (;;) {
      // The next request with a piece in this part.
      const MlaFlatSplit fs = MlaFlatSplit::make(st->total, parts);
      const long long x1 = fs.bound(part + 1);
      int b = st->b;
      long long start = st->start, first = 0;
      int lo_t = 0, hi_t = 0, tiles = 0, units = 1;
      for (; b < p.batch && start < x1; ++b) {
        tiles = request_tiles(p, b, seq_len, range);
        units = mla_flat_units(tiles, 0);  // its tiles' units
        first = start + c;                 // its first tile's unit
        start += c + units;
        fs.piece(first, units, part, &lo_t, &hi_t);
        if (hi_t > lo_t) break;
      }
      const int pf = fs.part_of(first), pl = fs.part_of(first + units - 1);
      __syncthreads();  // every thread has read the state
      // (Every thread walked alike: the vote says so to ptxas.)
      if (__all_sync(0xffffffffu, hi_t <= lo_t)) break;
      if (threadIdx.x == 0) {
        st->start = start;
        st->b = b + 1;
        st->pf = pf;
        st->pl = pl;
      }
      Work w;
      w.group = 0;
      w.rb = blockIdx.x;
      w.split = 0;
      w.phase = st->phase;
      w.b = b;
      w.seq_len = seq_len;
      w.lo = min(lo_t * kTile, range);
      w.hi = min(hi_t * kTile, range);
      w.n_tiles = w.hi > w.lo ? (w.hi - w.lo + kTile - 1) / kTile : 0;
      float o[128], m[2], l_tot[2];
      Loop::attend_item(p, w, sm, o, m, l_tot);  // (its barriers publish the state)
      const int first_part = st->pf, pieces = st->pl - first_part + 1;
      if (pieces == 1) {
        Loop::write_final(p, w, sm, o, m, l_tot);
      } else {
        const long long row0 = (long long)w.rb * (p.batch + parts) + w.b;
        Loop::write_partial(p.workspace + (row0 + part) * Out::kPartialFloats, o, m, l_tot);
        if (Out::last_to_arrive(p, (long long)w.b * gridDim.x + w.rb, sm.flag, threadIdx.x,
                                [] { __syncthreads(); }, pieces)) {
          merge_pieces(p.workspace + (row0 + first_part) * Out::kPartialFloats, pieces, part - first_part, o, m, l_tot);
          Loop::write_final(p, w, sm, o, m, l_tot);
        }
      }
      Io::advance_phase(w);
      if (threadIdx.x == 0) st->phase = w.phase;
      __syncthreads();  // Q, P, the row statistics and the state are free for the next piece
    }
  }
};

}  // namespace attnjit
