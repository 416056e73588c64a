// fp8 e4m3 KV on the MLA kernel's narrow tile (mla_hopper_narrow.cuh), widened in registers:
// no fp16 copy of the tile is ever written to shared memory. The wide tile widens each tile in
// shared memory (mla_hopper_fp8.cuh), which costs ~110 KB of shared-memory traffic a tile on top
// of the wgmma operands; at 16 rows that traffic, not the tensor work, would bound the kernel.
// Here both wgmma take their A operand from registers:
//   S^T = K Q^T: K's fragments by ldmatrix from the fp8 tile (a 32-bit word of four e4m3 is
//   two fp16 pairs), which permutes the 16 dims of each k step; Q is stored in that order.
//   O^T += V^T P^T: V^T's fragments by ldmatrix.trans (a word holds two tokens of two dims),
//   a byte permute and the same widening, which makes a warp's O^T rows g and g + 8 the
//   dims 2g and 2g + 1; the merge writes them there (finish<true>).
// The tiles land by TMA (64-byte swizzle: ldmatrix reads without bank conflicts) or, sparse,
// by cp.async into the same layout. Each warpgroup owns two of the four 36 KB stages.
#pragma once

#include "common/hopper.cuh"
#include "common/wgmma.cuh"
#include "mla/mla_hopper_narrow.cuh"

namespace attnjit {

template <class Tr, bool kTma>
struct MlaNarrowFp8 : MlaHopperNarrow<Tr, kTma> {
  using Base = MlaHopperNarrow<Tr, kTma>;
  using Io = MlaHopperIo<Tr, kTma>;
  using typename Io::QT;
  using typename Io::Work;
  using typename Io::Smem;
  using Base::kN;
  using Base::kColBar;
  using Base::kPBytes;
  static constexpr int kTile = Tr::kTile;
  static constexpr int kBlk8 = 64 * 64;     // 64 rows x 64 dims of e4m3
  static constexpr int kStage = 9 * kBlk8;  // one fp8 tile, 576 dims
  static constexpr int kBoxRows = Tr::kPageSize < 64 ? Tr::kPageSize : 64;
  static_assert(Tr::kFp8Kv && IsSame<typename Tr::T, half_t>::value, "fp8 KV, fp16 math");
  static_assert(4 * kStage <= 2 * Tr::kTileBytes, "four fp8 stages fill the two 16-bit buffers");

  // Stage s of warpgroup wg (its tiles alternate between its two): in the wide tile's buffer wg.
  __device__ static unsigned char* stage(const Smem& sm, int wg, int s) {
    return sm.base + Tr::kTileBytes * (1 + wg) + s * kStage;
  }
  __device__ static u64* full(const Smem& sm, int wg, int s) { return &sm.full[wg * 2 + s]; }
  // Sparse: the stage's rows' flags, after the two P^T tiles in A's P block.
  __device__ static int* flags(const Smem& sm, int wg, int s) {
    return reinterpret_cast<int*>(sm.base + 3 * Tr::kTileBytes + 2 * kPBytes) + (wg * 2 + s) * 64;
  }
  // TMA's 64-byte swizzle in a 512-byte aligned block of 64-byte rows: chunk c of row r.
  __device__ static int sw64(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }

  // Tile it into stage s of warpgroup wg: by TMA (one thread: boxes of 64 dims x kBoxRows
  // slots; a page past the range is outside the map and reads as zeros), or by the
  // warpgroup's cp.async (rows without a key zero-filled; sparse: the rows' flags too).
  __device__ static void load_tile(const MlaParams& p, const Work& w, const Smem& sm, int wg, int s, int tid, int it,
                                   const int (&e)[4]) {
    unsigned char* dst = stage(sm, wg, s);
    const int j0 = w.lo + it * kTile;
    if constexpr (kTma) {
      if (tid != 0) return;
      mbar_arrive_expect_tx(full(sm, wg, s), kStage);
#pragma unroll
      for (int cb = 0; cb < 9; ++cb)
#pragma unroll
        for (int sub = 0; sub < 64 / kBoxRows; ++sub)
          tma_load_3d(smem_addr(dst + cb * kBlk8 + sub * kBoxRows * 64), &p.kv_map, full(sm, wg, s), cb * 64,
                      (j0 + sub * kBoxRows) % Tr::kPageSize, e[sub * kBoxRows / 16]);
    } else {
      const unsigned char* kv = static_cast<const unsigned char*>(p.kv);
      const int r0 = tid / 8, cc = tid % 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = r0 + 16 * j;
        long long page, slot;
        if constexpr (Tr::kSparse) {
          page = e[j] / Tr::kPageSize;
          slot = e[j] % Tr::kPageSize;
          if (cc == 0) flags(sm, wg, s)[r] = e[j] >= 0;
        } else {
          page = e[j];
          slot = (j0 + r) % Tr::kPageSize;
        }
        const unsigned char* src = e[j] >= 0 ? kv + page * p.kv_stride_page + slot * p.kv_stride_tok : kv;
        // 36 chunks of 16 bytes a row: chunk q = cc + 8 i is block q / 4's chunk q % 4.
#pragma unroll
        for (int i = 0; i < 5; ++i) {
          const int q = cc + 8 * i;
          if (q < 36) cp_async_16(dst + (q / 4) * kBlk8 + sw64(r, q % 4), src + q * 16, e[j] >= 0 ? 16u : 0u);
        }
      }
      cp_async_mbar_arrive(full(sm, wg, s));
    }
  }

  // A 16-bit pair of the query as fp16 (a bf16 query is rounded, as the other fp8 paths do).
  __device__ static u32 q_pair(const QT* src) {
    if constexpr (IsFp8<QT>::value) {
      return widen_lo(QT{}, u32(*reinterpret_cast<const u16*>(src)));
    } else {
      return pack2<half_t>(to_float(src[0]), to_float(src[1]));
    }
  }

  // Q's 16 rows as fp16 into the 64-row Q tile, each k step's 16 dims in the order K's
  // fragments come in: logical pair j of a step holds dims 4j, 4j + 1 (j < 4) or 4(j - 4)
  // + 2, 4(j - 4) + 3, as widen4 splits a word of four e4m3.
  __device__ static void load_q(const MlaParams& p, const Work& w, const Smem& sm) {
    for (int i = threadIdx.x; i < kN * 288; i += 256) {  // rows x 36 k steps x 8 pairs
      const int r = i / 288, step = (i % 288) / 8, j = i % 8;
      const int dim = step * 16 + (j < 4 ? 4 * j : 4 * (j - 4) + 2), col = step * 16 + 2 * j;
      const QT* src = Io::q_row(p, w, w.rb * kN + r);
      *reinterpret_cast<u32*>(sm.base + swizzled_offset<64>(r, col & ~7) + (col & 7) * 2) =
          src ? q_pair(src + dim) : 0u;
    }
  }

  // S^T = K Q^T over the stage's tile: per 64-dim block, two ldmatrix.x4 give four k steps'
  // A fragments (rows g, g + 8 of the warp's 16 tokens), widened; double-buffered by block
  // parity so one block's loads and widening run under the previous block's wgmma.
  __device__ static void qk(float (&s)[8], const Smem& sm, const unsigned char* st, int warp, int lane) {
    const u64 dq = desc_k_major<64>(sm.q, 0);
    const int row = warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), half = lane >> 4;
    u32 a[2][4][4];
#pragma unroll
    for (int cb = 0; cb < 9; ++cb) {
      u32 (&ab)[4][4] = a[cb % 2];
      if (cb >= 2) wgmma_wait<1>();  // block cb - 2's wgmma, which read this buffer, are done
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 r[4];
        ldmatrix_x4(r, st + cb * kBlk8 + sw64(row, 2 * h + half));
        // r[0], r[1]: rows g, g + 8 of chunk 2h; r[2], r[3]: of chunk 2h + 1.
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          u32(&f)[4] = ab[2 * h + x];
          MlaHopperFp8<Tr>::widen4(r[2 * x], f[0], f[2]);
          MlaHopperFp8<Tr>::widen4(r[2 * x + 1], f[1], f[3]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_fence_operands(ab[kk]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int k0 = cb * 64 + kk * 16;
        Wgmma<half_t, kN>::rs(s, ab[kk], desc_step(dq, k_major_offset<64>(k0)), k0 > 0);
      }
      wgmma_commit();
    }
  }

  // O^T += V^T P^T: per 64-dim block, two ldmatrix.x4.trans give the warp's 16 dims x the
  // tile's 64 tokens; a word holds (token t, t + 1) x (dim 2g, 2g + 1): permuted to one
  // pair of tokens a dim and widened. Tokens at or past `valid` become 0 (their rows may
  // hold anything, and V meets P = 0 there: 0 * NaN is NaN).
  __device__ static void pv(float (&o)[8][8], const unsigned char* st, u32 pt, int valid, int warp, int lane) {
    const u64 dp = desc_k_major<kN>(pt, 0);
    const int q = lane & 3;
    u32 a[2][4][4];
#pragma unroll
    for (int mb = 0; mb < 8; ++mb) {
      u32 (&ab)[4][4] = a[mb % 2];
      if (mb >= 2) wgmma_wait<1>();
#pragma unroll
      for (int kp = 0; kp < 2; ++kp) {
        // Matrix i of the x4: tokens 32 kp + 16 (i / 2) + 8 (i % 2) + 0..7, the warp's 16 dims.
        const int tok = 32 * kp + (lane >> 3) * 8 + (lane & 7);
        u32 r[4];
        ldmatrix_x4_trans(r, st + mb * kBlk8 + sw64(tok, warp));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          // Thread's tokens in matrix i: t0 = base + 2q, t1 = t0 + 1; bytes after the permute:
          // (t0, d0), (t1, d0), (t0, d1), (t1, d1).
          const int t0 = 32 * kp + 8 * i + 2 * q;
          u32 x;
          asm("prmt.b32 %0, %1, 0, 0x3120;" : "=r"(x) : "r"(r[i]));
          x &= (t0 < valid ? 0x00ff00ffu : 0u) | (t0 + 1 < valid ? 0xff00ff00u : 0u);
          // k step 2 kp + i / 2; registers: rows g (dim 2g) / g + 8 (dim 2g + 1), tokens
          // 2q, 2q + 1 (i even) or 2q + 8, 2q + 9 (i odd).
          u32(&f)[4] = ab[2 * kp + i / 2];
          MlaHopperFp8<Tr>::widen4(x, f[(i % 2) * 2], f[(i % 2) * 2 + 1]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_fence_operands(ab[kk]);
      wgmma_fence_operands(o[mb]);  // (rescaled just before: those writes stay before the fence)
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        Wgmma<half_t, kN>::rs(o[mb], ab[kk], desc_step(dp, k_major_offset<kN>(kk * 16)), 1);
      wgmma_commit();
    }
  }

  // Warpgroup wg: tiles wg, wg + 2, ...; its k-th in stage k % 2, refilled with tile it + 4.
  __device__ static void run_wg(const MlaParams& p, const Work& w, const Smem& sm, int wg, int tid,
                                const int (&limit)[4], int lim_min, float scale_log2, float (&o)[8][8], float (&m)[4],
                                float (&l)[4]) {
    const int warp = tid / 32, lane = tid % 32;
    const u32 pt = sm.p0 + wg * kPBytes;
    for (int it = wg, k = 0; it < w.n_tiles; it += 2, ++k) {
      const int s_ = k % 2;
      mbar_wait(full(sm, wg, s_), (k / 2) & 1);
      const unsigned char* st = stage(sm, wg, s_);
      float s[8];
      qk(s, sm, st, warp, lane);
      int e[4];
      Io::lookup_rows(p, w, it + 4, tid, e);  // the refill's pages, while S runs
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      float alpha[4];
      bool key[2] = {true, true};
      if constexpr (Tr::kSparse)
#pragma unroll
        for (int h = 0; h < 2; ++h) key[h] = flags(sm, wg, s_)[Base::frag_row(2 * h, warp, lane)] != 0;
      Base::softmax(s, key, it, limit, lim_min, scale_log2, m, l, alpha, sm.m + wg * 4 * kN, wg, warp, lane);
      Base::store_pt(pt, s, warp, lane);
      fence_proxy_async_shared();  // P^T: generic stores, read by the wgmma
      named_barrier_sync(kColBar + wg, 128);
      Base::rescale(o, alpha);
      pv(o, st, pt, w.hi - w.lo - it * kTile, warp, lane);
      wgmma_wait<0>();
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) wgmma_fence_operands(o[mb]);
      if (it + 4 < w.n_tiles) {
        named_barrier_sync(kColBar + wg, 128);  // every warp has read the stage (and its flags)
        load_tile(p, w, sm, wg, s_, tid, it + 4, e);
      }
    }
  }

  __device__ __forceinline__ static void run(const MlaParams& p, unsigned char* smem_raw) {
    const Smem sm = Io::carve(smem_raw);
    if (threadIdx.x == 0)
      for (int i = 0; i < 4; ++i) mbar_init(&sm.full[i], kTma ? 1 : 128);  // TMA: the expect_tx arrival
    __syncthreads();
    pdl_wait_prior_grid();
    const Work w = Io::work(p);
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    load_q(p, w, sm);
    // The warpgroup's first two tiles: wg and wg + 2.
#pragma unroll
    for (int s_ = 0; s_ < 2; ++s_) {
      const int it = wg + 2 * s_;
      if (it < w.n_tiles) {
        int e[4];
        Io::lookup_rows(p, w, it, tid, e);
        load_tile(p, w, sm, wg, s_, tid, it, e);
      }
    }
    fence_proxy_async_shared();  // Q: generic stores, read by the wgmma
    __syncthreads();
    int limit[4], lim_min;
    Base::column_limits(p, w, lane, limit, lim_min);
    float o[8][8], m[4], l[4];
    Base::clear(o, m, l);
    run_wg(p, w, sm, wg, tid, limit, lim_min, Base::scale_log2(p), o, m, l);
    asm volatile("cp.async.wait_all;" ::: "memory");
    pdl_launch_dependents();
    Base::template finish<true>(p, w, sm.m, sm.base + Tr::kTileBytes, Tr::kTileBytes, sm.flag, [] { __syncthreads(); },
                                wg, warp, lane, o, m, l);
  }
};

}  // namespace attnjit
