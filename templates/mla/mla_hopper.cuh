// The Hopper MLA decode kernel (trtllm-gen backend, sm_90a): two math warpgroups
// that share every tile's work ("seesaw", the schedule of FlashMLA's write-up).
// A CTA holds 64 query rows (head x query token) and walks its split of the KV in
// 64-token tiles of all 576 dims, two tiles at a time: A (buffer 0) and B (buffer 1).
//   - Warpgroup 0 computes S = Q K^T and the softmax of A, warpgroup 1 those of B,
//     one after the other (B's row maxima start from A's).
//   - O is split by columns: warpgroup 0 holds O[:, 0..255], warpgroup 1 O[:, 256..511].
//     Each runs P V over both tiles for its half: its own tile's P from registers,
//     the other's P from shared memory (rescaled to the pair's final maxima).
//   - Each warpgroup loads its half of every tile's columns (0..255 by 0; 256..575
//     by 1) as soon as its own P V frees that half, so the next pair streams in while
//     this one computes: dense pages by TMA (one thread issues the half's boxes),
//     sparse rows (or any call without a tensor map) by cp.async from all 128 threads.
// Q's rope dims (512..575) live in registers, so their shared-memory block holds B's P.
// The hand-overs are named barriers between the warpgroups; the loads complete on
// mbarriers. Split-KV CTAs merge in the last one (mla_epilogue.cuh).
// fp8 KV: each half tile lands as fp8 and is widened to fp16 in place by the warpgroup
// that computes the tile's S, just before that S (mla_hopper_fp8.cuh); the math runs in fp16.
// CTAs of 16 or 32 rows at most (the narrow spec bits) run the narrow tile instead (rows in
// wgmma's N, mla_hopper_narrow.cuh), through a producer warpgroup's ring of blocks
// (mla_hopper_narrow_ring.cuh); fp8 KV widened in registers (mla_hopper_narrow_fp8.cuh).
// The flat spec bit walks parts across request boundaries (mla_hopper_flat.cuh; off by default).
#pragma once

#include "common/hopper.cuh"
#include "common/wgmma.cuh"
#include "mla/mla_epilogue.cuh"
#include "mla/mla_hopper_io.cuh"
#include "mla/mla_hopper_narrow.cuh"
#include "mla/mla_hopper_narrow_fp8.cuh"
#include "mla/mla_hopper_flat.cuh"
#include "mla/mla_hopper_narrow_ring.cuh"

namespace attnjit {

template <class QT_, class KVT_, class OT_, int kPageSize_, bool kSparse_, unsigned kFeatures_>
struct MlaHopperTraits {
  using QT = QT_;
  using KVT = KVT_;
  static constexpr bool kFp8Kv = IsFp8<KVT_>::value;
  using T = typename Select<kFp8Kv, half_t, QT_>::type;  // the wgmma operands' type
  using OT = OT_;
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kSparse = kSparse_;
  static constexpr unsigned kFeatures = kFeatures_;
  static constexpr bool kSplitRope = false;
  // mla_hopper_narrow.cuh's tile: 16 rows in N, or 32.
  static constexpr bool kNarrow32 = (kFeatures_ & mla_const::kFeatNarrow32) != 0;
  static constexpr bool kNarrow = kNarrow32 || (kFeatures_ & mla_const::kFeatNarrow) != 0;
  static constexpr int kRows = kNarrow32 ? mla_const::kNarrow32Rows : kNarrow ? mla_const::kNarrowRows : mla_const::kHopperRows;
  // The wide tile: 64-token tiles in two KV buffers, or (kFeatTile32) 32-token tiles in four.
  static constexpr bool kTile32 = (kFeatures_ & mla_const::kFeatTile32) != 0;
  static constexpr int kTile = kTile32 ? mla_const::kHopperTile32 : mla_const::kHopperTile;
  static constexpr int kBufs = mla_wide_buffers(kTile);
  // The narrow tile: a producer warpgroup and a ring of blocks (mla_hopper_narrow_ring.cuh).
  static constexpr bool kRing = kNarrow;
  static constexpr int kThreads = kRing ? mla_const::kRingThreads : 256, kMinBlocks = 1;
  static constexpr int kRingSlots = kRing ? mla_ring_slots(kRows, sizeof(KVT_)) : 0;
  static constexpr int kBlockBytes = 64 * 128;        // one 64-row x 64-dim swizzled column block (Q, P)
  static constexpr int kTileBytes = 9 * kBlockBytes;  // Q: 576 dims
  static constexpr int kKvBlockBytes = kTile * 128;   // a KV buffer's column block: kTile rows x 64 dims
  static constexpr int kKvTileBytes = 9 * kKvBlockBytes;
  static constexpr int kTokInts = kSparse ? kBufs * kTile : 0;  // the sparse rows' flags
  static constexpr int kSmemBytes = kRing ? mla_ring_smem_bytes(kRows, sizeof(KVT_)) : mla_wide_smem_bytes(kTile, kSparse);
  static_assert(!IsFp8<QT_>::value || kFp8Kv, "an fp8 query needs an fp8 KV cache");
  static_assert(IsFp8<KVT_>::value || sizeof(KVT_) == 2, "16-bit or fp8 KV");
  static_assert(!kTile32 || (!kFp8Kv && !kSparse && !kNarrow), "tile32: the wide tile with dense 16-bit KV");
};

// The two math warpgroups over the loads of MlaHopperIo; kTma picks the load path, so each
// hot loop holds only its own (two instantiations).
template <class Tr, bool kTma>
struct MlaHopperLoop : MlaHopperIo<Tr, kTma> {
  using Io = MlaHopperIo<Tr, kTma>;
  using Traits = Tr;
  using typename Io::T;
  using typename Io::QT;
  using typename Io::Work;
  using typename Io::Smem;
  using typename Io::Fp8;
  using Out = MlaEpilogue<Tr, Tr::kRows>;
  using Io::D;
  using Io::DV;
  using Io::kTile;
  using Io::kBlk;
  using Io::kBufs;
  using Io::kKvBlk;
  using Io::kKvTileBytes;
  using Io::kLeftBlocks;
  using Io::kMaxA;
  using Io::kMaxB;
  using Io::kP0Ready;
  using Io::kP1Ready;
  using Io::carve;
  using Io::lookup_rows;
  using Io::load;
  using Io::zero_tail;
  using Io::widen;
  using Io::wait_block;
  using Io::load_q;
  using Io::q_rope_regs;

  // S's accumulators (64 rows x kTile tokens) and P's A fragments (kTile / 16 k steps).
  static constexpr int kS = kTile / 2, kPSteps = kTile / 16;

  // S (=, or += when `accumulate`) Q K^T over column blocks [kb0, kb1) of tile it's
  // buffer, each block once it has landed; block 8 (rope) takes Q from registers.
  // (Descriptors: built once per operand, then stepped by constants, desc_step.)
  template <int kb0, int kb1>
  __device__ static void qk(float (&s)[kS], const Work& w, const Smem& sm, int it, const u32 (&rq)[4][4], bool accumulate) {
    const u64 dq = desc_k_major<64>(sm.q, 0), dk = desc_k_major<kTile>(sm.kv + (it % kBufs) * kKvTileBytes, 0);
#pragma unroll
    for (int cb = kb0; cb < kb1; ++cb) {
      wait_block(w, sm, it, cb);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int k0 = cb * 64 + kk * 16;
        const u32 off_k = k_major_offset<kTile>(k0);
        if (cb < 8)
          Wgmma<T, kTile>::ss(s, desc_step(dq, k_major_offset<64>(k0)), desc_step(dk, off_k), accumulate || k0 > kb0 * 64);
        else
          Wgmma<T, kTile>::rs(s, rq[kk], desc_step(dk, off_k), 1);
      }
    }
    wgmma_commit();
  }

  // O[:, half] += P V[:, half] of tile it: P from registers, or from shared memory at sp.
  __device__ static void pv_regs(float (&o)[128], const u32 (&pa)[kPSteps][4], const Smem& sm, int it, int half) {
    const u64 dv = desc_mn_major<kTile>(sm.kv + (it % kBufs) * kKvTileBytes + half * kLeftBlocks * kKvBlk, 0);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) Wgmma<T, DV / 2>::rs_mn(o, pa[kk], desc_step(dv, mn_major_offset(kk * 16)), 1);
    wgmma_commit();
  }
  // (P at sp: a 64 x 64 block, its first kTile columns.)
  __device__ static void pv_smem(float (&o)[128], u32 sp, const Smem& sm, int it, int half) {
    const u64 dv = desc_mn_major<kTile>(sm.kv + (it % kBufs) * kKvTileBytes + half * kLeftBlocks * kKvBlk, 0);
    const u64 dp = desc_k_major<64>(sp, 0);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk)
      Wgmma<T, DV / 2>::ss_mn(o, desc_step(dp, k_major_offset<64>(kk * 16)), desc_step(dv, mn_major_offset(kk * 16)), 1);
    wgmma_commit();
  }

  // Masks and scales S of tile it, then the online softmax against the running max m:
  // m moves to the new max, l is rescaled and gains the tile's row sums, s becomes P,
  // alpha is the rows' rescale factor for what came before.
  __device__ static void softmax(float (&s)[kS], const Work& w, const Smem& sm, int it, const int (&limit)[2],
                                 float scale_log2, float (&m)[2], float (&l)[2], float (&alpha)[2], int lane) {
    const int j0 = it * kTile;  // range offset of the tile's first key
    float mx[2] = {kNegInf, kNegInf};
    // A tile whose every key both rows see (dense, before the range end and the causal
    // limit): the max is taken on the raw scores (a positive scale keeps it the max) and
    // the scale folds into the exponent's multiply-add.
    const bool interior = !Tr::kSparse && scale_log2 > 0.f && j0 + kTile <= min(limit[0], limit[1]);
    if (interior) {
#pragma unroll
      for (int i = 0; i < kS; ++i) mx[(i % 4) / 2] = fmaxf(mx[(i % 4) / 2], s[i]);
      mx[0] *= scale_log2;
      mx[1] *= scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < kS; ++i) {
        const int hf = (i % 4) / 2, col = (i / 4) * 8 + (lane & 3) * 2 + (i % 2);
        bool vis = j0 + col < limit[hf];
        if constexpr (Tr::kSparse) vis = vis && sm.tok[(it % kBufs) * kTile + col] != 0;
        s[i] = vis ? s[i] * scale_log2 : kNegInf;
        mx[hf] = fmaxf(mx[hf], s[i]);
      }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      mx[hf] = quad_max(mx[hf]);
      alpha[hf] = online_max_step(m[hf], l[hf], mx[hf]);
    }
    const float mul = interior ? scale_log2 : 1.f;
#pragma unroll
    for (int i = 0; i < kS; ++i) {
      s[i] = fast_exp2(fmaf(s[i], mul, -mx[(i % 4) / 2]));
      l[(i % 4) / 2] += s[i];
    }
  }

  // P in the A-operand layout: k step kk takes the 8-wide blocks 2kk and 2kk + 1.
  __device__ static void pack_p(const float (&s)[kS], u32 (&pa)[kPSteps][4]) {
#pragma unroll
    for (int i = 0; i < kS; i += 2) pa[i / 8][((i / 4) % 2) * 2 + (i % 4) / 2] = pack2<T>(s[i], s[i + 1]);
  }
  // P (16-bit, pack_p's fragments) into a swizzled 64 x 64 tile at shared address pt
  // that a wgmma reads K-major: one stmatrix per k step, whose four registers are the
  // step's four 8x8 matrices (a matrix row is one 16-byte swizzle chunk). The other
  // warpgroup's wgmma may read it after fence_proxy_async_shared.
  __device__ static void store_p(u32 pt, const u32 (&pa)[kPSteps][4], int warp, int lane) {
    const int j = lane / 8, r = warp * 16 + (j % 2) * 8 + lane % 8;  // matrix j: row half j % 2, n tile + j / 2
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk)
      stmatrix_x4(pt + swizzled_offset<64>(r, (2 * kk + j / 2) * 8), pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
  }

  __device__ static void rescale(float (&o)[128], float a0, float a1) {
    // Once the row maxima settle, the factors are 1 across the warp: skip it.
    if (__all_sync(0xffffffffu, a0 == 1.f && a1 == 1.f)) return;
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= (i % 4) / 2 ? a1 : a0;
  }

  // The row-stats arrays, written by one thread of each row's quad.
  __device__ static void put_rows(float* dst, const float (&v)[2], int warp, int lane) {
    if ((lane & 3) == 0) {
      dst[warp * 16 + (lane >> 2)] = v[0];
      dst[warp * 16 + (lane >> 2) + 8] = v[1];
    }
  }
  __device__ static void get_rows(const float* src, float (&v)[2], int warp, int lane) {
    v[0] = src[warp * 16 + (lane >> 2)];
    v[1] = src[warp * 16 + (lane >> 2) + 8];
  }

  // Warpgroup 0: S and softmax of every A tile; O[:, 0..255]; loads blocks 0..3.
  // On return m and l are the rows' final max and this warpgroup's share of the sum.
  __device__ static void run_wg0(const MlaParams& p, const Work& w, const Smem& sm, int tid, const u32 (&rq)[4][4],
                                 const int (&limit)[2], float scale_log2, float (&o)[128], float (&m)[2], float (&l)[2]) {
    const int warp = tid / 32, lane = tid % 32;
    float s[kS];
    if (w.n_tiles > 0) {
      widen<0, kLeftBlocks>(w, sm, 0, 0, tid);
      qk<0, 4>(s, w, sm, 0, rq, false);
      widen<kLeftBlocks, 9>(w, sm, 0, 0, tid);
      qk<4, 9>(s, w, sm, 0, rq, true);
      wgmma_wait<0>();
      wgmma_fence_operands(s);
    }
    for (int a = 0; a < w.n_tiles; a += 2) {
      const bool has_b = a + 1 < w.n_tiles, next_a = a + 2 < w.n_tiles;
      // The tiles that refill this pair's buffers: the next pair (two buffers) or the one after (four).
      const int ra = a + kBufs, rb = a + 1 + kBufs;
      const bool load_a = ra < w.n_tiles, load_b = rb < w.n_tiles;
      float alpha[2];
      softmax(s, w, sm, a, limit, scale_log2, m, l, alpha, lane);
      put_rows(sm.m, m, warp, lane);
      put_rows(sm.scale_a, alpha, warp, lane);
      named_barrier_arrive(kMaxA, 256);
      u32 pa[kPSteps][4];
      pack_p(s, pa);
      rescale(o, alpha[0], alpha[1]);
      zero_tail(p, w, sm, a, 0, tid);
      pv_regs(o, pa, sm, a, 0);
      // The refills' pages, read while warpgroup 1 runs B's softmax (before A's, they
      // delayed the max hand-over that B's softmax waits for).
      int ea[4], eb[4];
      lookup_rows(p, w, ra, tid, ea);
      lookup_rows(p, w, rb, tid, eb);
      // B's maxima: A's P joins them for warpgroup 1's half of O.
      named_barrier_sync(kMaxB, 256);
      // A's left half is free once its P V is done: refill it before handing A's P over
      // (the refill is read at the next S, within a microsecond; the hand-over waits less).
      wgmma_wait<0>();
      wgmma_fence_operands(o);
      if (load_a) load<0, kLeftBlocks>(p, w, sm, tid, ra, ea, true, Io::kTokBar);
      float sb[2];
      get_rows(sm.scale_b, sb, warp, lane);
      get_rows(sm.m, m, warp, lane);
#pragma unroll
      for (int i = 0; i < kS; ++i) s[i] *= sb[(i % 4) / 2];
      pack_p(s, pa);
      store_p(sm.p0, pa, warp, lane);
      fence_proxy_async_shared();  // generic stores, visible to warpgroup 1's wgmma
      named_barrier_arrive(kP0Ready, 256);
      l[0] *= sb[0];
      l[1] *= sb[1];
      if (has_b) {
        named_barrier_sync(kP1Ready, 256);
        rescale(o, sb[0], sb[1]);
        zero_tail(p, w, sm, a + 1, 0, tid);
        pv_smem(o, sm.p1, sm, a + 1, 0);
      }
      if (next_a) {
        widen<0, kLeftBlocks>(w, sm, a + 2, 0, tid);
        qk<0, 4>(s, w, sm, a + 2, rq, false);
        wgmma_wait<1>();  // B's P V: B's left half is free
        wgmma_fence_operands(o);
        if (load_b) load<0, kLeftBlocks>(p, w, sm, tid, rb, eb, false, Io::kTokBar);  // (load_b: next_a too)
        widen<kLeftBlocks, 9>(w, sm, a + 2, 0, tid);
        qk<4, 9>(s, w, sm, a + 2, rq, true);
      }
      wgmma_wait<0>();
      wgmma_fence_operands(o);
      wgmma_fence_operands(s);
    }
  }

  // Warpgroup 1: S and softmax of every B tile; O[:, 256..511]; loads blocks 4..8.
  __device__ static void run_wg1(const MlaParams& p, const Work& w, const Smem& sm, int tid, const u32 (&rq)[4][4],
                                 const int (&limit)[2], float scale_log2, float (&o)[128], float (&m)[2], float (&l)[2]) {
    const int warp = tid / 32, lane = tid % 32;
    float s[kS];
    if (w.n_tiles > 1) {
      widen<kLeftBlocks, 9>(w, sm, 1, 1, tid);
      qk<4, 9>(s, w, sm, 1, rq, false);
      widen<0, kLeftBlocks>(w, sm, 1, 1, tid);
      qk<0, 4>(s, w, sm, 1, rq, true);
      wgmma_wait<0>();
      wgmma_fence_operands(s);
    }
    for (int a = 0; a < w.n_tiles; a += 2) {
      const bool has_b = a + 1 < w.n_tiles, next_b = a + 3 < w.n_tiles;
      // The tiles that refill this pair's buffers: the next pair (two buffers) or the one after (four).
      const int ra = a + kBufs, rb = a + 1 + kBufs;
      const bool load_a = ra < w.n_tiles, load_b = rb < w.n_tiles;
      int ea[4], eb[4];
      lookup_rows(p, w, ra, tid, ea);
      lookup_rows(p, w, rb, tid, eb);
      named_barrier_sync(kMaxA, 256);
      float sa[2], alpha[2] = {1.f, 1.f};
      get_rows(sm.m, m, warp, lane);
      get_rows(sm.scale_a, sa, warp, lane);
      l[0] *= sa[0];
      l[1] *= sa[1];
      if (has_b) softmax(s, w, sm, a + 1, limit, scale_log2, m, l, alpha, lane);
      put_rows(sm.m, m, warp, lane);
      put_rows(sm.scale_b, alpha, warp, lane);
      named_barrier_arrive(kMaxB, 256);
      rescale(o, sa[0] * alpha[0], sa[1] * alpha[1]);
      u32 pb[kPSteps][4];
      if (has_b) {
        pack_p(s, pb);
        store_p(sm.p1, pb, warp, lane);
        zero_tail(p, w, sm, a + 1, 1, tid);
        pv_regs(o, pb, sm, a + 1, 1);
        // The fence after the wgmma's issue: its drain does not hold the issue up.
        fence_proxy_async_shared();
        named_barrier_arrive(kP1Ready, 256);
      }
      named_barrier_sync(kP0Ready, 256);
      zero_tail(p, w, sm, a, 1, tid);
      pv_smem(o, sm.p0, sm, a, 1);
      if (has_b) {
        wgmma_wait<1>();  // B's P V: B's right half is free
        wgmma_fence_operands(o);
        if (load_b) load<kLeftBlocks, 9>(p, w, sm, tid, rb, eb, true, Io::kTokBar + 1);
      }
      wgmma_wait<0>();
      wgmma_fence_operands(o);
      if (load_a) load<kLeftBlocks, 9>(p, w, sm, tid, ra, ea, false, Io::kTokBar + 1);  // A's right half is free
      if (next_b) {
        widen<kLeftBlocks, 9>(w, sm, a + 3, 1, tid);
        qk<4, 9>(s, w, sm, a + 3, rq, false);
        widen<0, kLeftBlocks>(w, sm, a + 3, 1, tid);
        qk<0, 4>(s, w, sm, a + 3, rq, true);
        wgmma_wait<0>();
        wgmma_fence_operands(s);
      }
    }
  }

  // Work item w (a split, or a flat piece): Q, the first loads and both warpgroups' loops.
  // On return o and m are the rows' (this warpgroup's half of O), l_tot their whole sums.
  __device__ __forceinline__ static void attend_item(const MlaParams& p, const Work& w, const Smem& sm, float (&o)[128],
                                                     float (&m)[2], float (&l_tot)[2]) {
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    if constexpr (Tr::kFp8Kv) {
      const QT* q = static_cast<const QT*>(p.q);
      Fp8::load_q(sm.base, threadIdx.x, [&](int j) -> const unsigned char* {
        const int row = w.rb * Tr::kRows + threadIdx.x / 8 + 32 * j, f = w.group * p.rows_per_group + row;
        if (row >= p.rows_per_group) return nullptr;
        return reinterpret_cast<const unsigned char*>(q + w.b * p.q_stride_b + (f / p.num_heads) * p.q_stride_t +
                                                      (f % p.num_heads) * p.q_stride_h);
      });
    } else {
      load_q(p, w, sm, threadIdx.x);
    }
    cp_async_commit();
    // A tile for every buffer, each warpgroup its half of the columns (the sparse flags by the
    // warpgroup that computes the tile's S: 0 for even tiles, 1 for odd).
    for (int it = 0; it < kBufs && it < w.n_tiles; ++it) {
      int e[4];
      lookup_rows(p, w, it, tid, e);
      if (wg == 0) load<0, kLeftBlocks>(p, w, sm, tid, it, e, it % 2 == 0, Io::kTokBar);
      else load<kLeftBlocks, 9>(p, w, sm, tid, it, e, it % 2 == 1, Io::kTokBar + 1);
    }
    cp_async_wait<0>();  // Q (the committed group)
    fence_proxy_async_shared();
    __syncthreads();
    u32 rq[4][4];
    q_rope_regs(sm, rq, warp, lane);
    __syncthreads();  // every thread holds the rope block before B's P overwrites it

    // Range offset limits: query token t of the request sees positions < seq_len - q_len + t + 1.
    int limit[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = w.rb * Tr::kRows + warp * 16 + (lane >> 2) + hf * 8;
      const int t = (w.group * p.rows_per_group + row) / p.num_heads;
      // (dense: and no key past the block table, whose rows were zero-filled)
      limit[hf] = (Tr::kSparse ? w.hi : min(min(w.hi, w.seq_len - p.q_len + t + 1), p.pages_per_seq * Tr::kPageSize)) - w.lo;
    }
    const float scale_log2 = (p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale) * kLog2e;
    float l[2] = {0.f, 0.f};
    m[0] = m[1] = kNegInf;
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    if (wg == 0) run_wg0(p, w, sm, tid, rq, limit, scale_log2, o, m, l);
    else run_wg1(p, w, sm, tid, rq, limit, scale_log2, o, m, l);
    asm volatile("cp.async.wait_all;" ::: "memory");
    pdl_launch_dependents();

    // The rows' sums: each warpgroup's share, added.
    float lw[2] = {quad_sum(l[0]), quad_sum(l[1])};
    put_rows(sm.lsum + wg * 64, lw, warp, lane);
    __syncthreads();
    float lo_[2], l1_[2];
    get_rows(sm.lsum, lo_, warp, lane);
    get_rows(sm.lsum + 64, l1_, warp, lane);
    l_tot[0] = lo_[0] + l1_[0];
    l_tot[1] = lo_[1] + l1_[1];
  }

  // The item's rows, finished, into out (and LSE). Where out's rows are 16-byte aligned they go
  // through shared memory (the KV buffers, idle once the loops end: every load issued was
  // consumed) and leave whole, one bulk copy a row. (A lane's own pairs, 8 rows of 16 bytes a
  // warp store, wrote 2-4x the sectors and queued at the end of every CTA: ~10% of the stall
  // samples at 128 heads.) Every thread of the CTA calls it (it holds a __syncthreads).
  static constexpr int kStageRow = DV * 2 + 16;  // bytes a staged row (16 more: no bank conflicts)
  __device__ __forceinline__ static void write_final(const MlaParams& p, const Work& w, const Smem& sm,
                                                     const float (&o)[128], const float (&m)[2], const float (&l_tot)[2]) {
    using OT = typename Tr::OT;
    static_assert(sizeof(OT) == 2 && Tr::kRows * kStageRow <= kBufs * kKvTileBytes, "16-bit rows fit the KV buffers");
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    // The dense fallback without a tensor map keeps its lanes' pair stores (staging made ptxas
    // spill in its loop), as do rows that are not 16-byte aligned.
    if ((!kTma && !Tr::kSparse) || !Out::rows_aligned16(p)) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float acc[64];
#pragma unroll
        for (int n = 0; n < 32; ++n) {
          acc[2 * n] = o[4 * n + 2 * hf];
          acc[2 * n + 1] = o[4 * n + 2 * hf + 1];
        }
        const int row = w.rb * Tr::kRows + warp * 16 + (lane >> 2) + hf * 8;
        Out::template finish_row<64, 1, 8>(p, w.b, w.group, row, wg * (DV / 2) + (lane & 3) * 2, m[hf], l_tot[hf], acc,
                                           wg == 0 && (lane & 3) == 0);
      }
      return;
    }
    // Rows padded by 16 bytes: a warp's stores (8 rows x 16 bytes) meet no bank conflicts.
    unsigned char* stage = sm.base + Tr::kTileBytes;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = warp * 16 + (lane >> 2) + hf * 8;
      const float scale = Out::row_scale(p, w.b, w.group, w.rb * Tr::kRows + r, m[hf], l_tot[hf], wg == 0 && (lane & 3) == 0);
      unsigned char* dst = stage + r * kStageRow + (wg * (DV / 2) + (lane & 3) * 2) * 2;
#pragma unroll
      for (int n = 0; n < 32; ++n)
        *reinterpret_cast<u32*>(dst + n * 16) = pack2<OT>(o[4 * n + 2 * hf] * scale, o[4 * n + 2 * hf + 1] * scale);
    }
    fence_proxy_async_shared();
    __syncthreads();
    if (threadIdx.x < min(Tr::kRows, p.rows_per_group - w.rb * Tr::kRows)) {
      const int r = threadIdx.x;
      bulk_store(Out::out_row(p, w.b, w.group, w.rb * Tr::kRows + r), smem_addr(stage + r * kStageRow), DV * 2);
      bulk_store_commit_and_wait_read();
    }
  }

  // The item's unnormalised O and the rows' m and l, into partial block `part`.
  __device__ __forceinline__ static void write_partial(float* part, const float (&o)[128], const float (&m)[2],
                                                       const float (&l_tot)[2]) {
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
#pragma unroll
    for (int n = 0; n < 32; ++n)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = warp * 16 + (lane >> 2) + hf * 8;
        *reinterpret_cast<float2*>(part + r * DV + wg * (DV / 2) + n * 8 + (lane & 3) * 2) =
            make_float2(o[4 * n + 2 * hf], o[4 * n + 2 * hf + 1]);
      }
    if (wg == 0 && (lane & 3) == 0) {  // the rows' m and l
      const int r = warp * 16 + (lane >> 2);
      part[Tr::kRows * DV + r] = m[0];
      part[Tr::kRows * DV + r + 8] = m[1];
      part[Tr::kRows * DV + Tr::kRows + r] = l_tot[0];
      part[Tr::kRows * DV + Tr::kRows + r + 8] = l_tot[1];
    }
  }

  __device__ __forceinline__ static void run(const MlaParams& p, unsigned char* smem_raw) {
    const Smem sm = carve(smem_raw);
    Io::init_barriers(sm);
    if constexpr (Io::kFlat) {
      MlaHopperFlat<MlaHopperLoop>::run(p, sm);
    } else {
      const Work w = Io::work(p);
      float o[128], m[2], l_tot[2];
      attend_item(p, w, sm, o, m, l_tot);
      if (p.num_splits == 1) return write_final(p, w, sm, o, m, l_tot);
      const long long cta = (long long)w.b * gridDim.y + blockIdx.y;
      write_partial(Out::partial(p, cta, w.split), o, m, l_tot);
      if (p.split_pass == 1) return;  // a combine launch merges them
      // Every thread is here (one call site): a plain __syncthreads; the first 256 merge, 4 per row.
      if (Out::last_to_arrive(p, cta, sm.flag, threadIdx.x, [] { __syncthreads(); }))
        Out::template merge<4>(p, w.b, w.group, w.rb, cta, threadIdx.x);
    }
  }
};

// The kernel's entry: the combine pass, or the attention pass on its tile (wide: 64 rows
// in M; kNarrow: at most 16 rows, in N) and its load path.
template <class Tr>
struct MlaHopper {
  // (Inlined: a wgmma pipeline that crosses a call is serialized by ptxas, C7510.)
  template <template <class, bool> class Loop>
  __device__ __forceinline__ static void attend(const MlaParams& p, unsigned char* smem_raw) {
    if constexpr (Tr::kFp8Kv) {
      // Dense fp8 always by TMA (the host builds its map, or routes the call to xqa); sparse rows by cp.async.
      Loop<Tr, !Tr::kSparse>::run(p, smem_raw);
    } else {
      if constexpr (!Tr::kSparse) {
        if (p.kv_tma != 0) return Loop<Tr, true>::run(p, smem_raw);
      }
      Loop<Tr, false>::run(p, smem_raw);
    }
  }

  __device__ __forceinline__ static void run(const MlaParams& p, unsigned char* smem_raw) {
    // The combine: the wide tile's 255 registers hold 32 splits' float4s a thread, the narrow 16.
    if (p.split_pass == 2) return MlaEpilogue<Tr, Tr::kRows>::template combine_any<Tr::kNarrow ? 16 : 32>(p, smem_raw);
    if constexpr (Tr::kNarrow) attend<MlaNarrowRing>(p, smem_raw);
    else attend<MlaHopperLoop>(p, smem_raw);
  }
};

}  // namespace attnjit
