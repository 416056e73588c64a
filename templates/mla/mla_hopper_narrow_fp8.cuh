// fp8 e4m3 KV on the MLA kernel's narrow tile (mla_hopper_narrow.cuh), widened in registers:
// no fp16 copy of the tile is ever written to shared memory. The wide tile widens each tile in
// shared memory (mla_hopper_fp8.cuh), which costs ~110 KB of shared-memory traffic a tile on top
// of the wgmma operands; at 16 rows that traffic, not the tensor work, would bound the kernel.
// Here both wgmma take their A operand from registers:
//   S^T = K Q^T: K's fragments by ldmatrix from the fp8 block (a 32-bit word of four e4m3 is
//   two fp16 pairs), which permutes the 16 dims of each k step; Q is stored in that order.
//   O^T += V^T P^T: V^T's fragments by ldmatrix.trans (a word holds two tokens of two dims),
//   a byte permute and the same widening, which makes a warp's O^T rows g and g + 8 the
//   dims 2g and 2g + 1; the merge writes them there (finish<true>).
// The blocks (64 tokens x 64 dims, 64-byte rows, TMA's 64-byte swizzle: ldmatrix reads them
// without bank conflicts) come from the ring of mla_hopper_narrow_ring.cuh, and go back to it
// as soon as their fragments are in registers: the rope block after S's ldmatrix, the others
// after P V's.
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
  using Base::kN;
  using Base::kColBar;
  using Base::kPBytes;
  using Base::kMathThreads;
  static constexpr int kTile = Tr::kTile;
  static_assert(Tr::kFp8Kv && IsSame<typename Tr::T, half_t>::value, "fp8 KV, fp16 math");

  // TMA's 64-byte swizzle in a 512-byte aligned block of 64-byte rows: chunk c of row r.
  __device__ static int sw64(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }

  // A 16-bit pair of the query as fp16 (a bf16 query is rounded, as the other fp8 paths do).
  __device__ static u32 q_pair(const QT* src) {
    if constexpr (IsFp8<QT>::value) {
      return widen_lo(QT{}, u32(*reinterpret_cast<const u16*>(src)));
    } else {
      return pack2<half_t>(to_float(src[0]), to_float(src[1]));
    }
  }

  // Q's N rows as fp16 into the compact Q tile at q (N-row blocks), each k step's 16 dims in
  // the order K's fragments come in: logical pair j of a step holds dims 4j, 4j + 1 (j < 4)
  // or 4(j - 4) + 2, 4(j - 4) + 3, as widen4 splits a word of four e4m3. By the 256 math
  // threads (t: 0-255), every load issued before the first store.
  __device__ static void load_q(const MlaParams& p, const Work& w, unsigned char* q, int t) {
    constexpr int kPairs = kN * 288, kEach = (kPairs + kMathThreads - 1) / kMathThreads;  // rows x 36 k steps x 8 pairs
    u32 v[kEach];
#pragma unroll
    for (int k = 0; k < kEach; ++k) {
      const int i = t + kMathThreads * k, r = i / 288, step = (i % 288) / 8, j = i % 8;
      const int dim = step * 16 + (j < 4 ? 4 * j : 4 * (j - 4) + 2);
      const QT* src = i < kPairs ? Io::q_row(p, w, w.rb * kN + r) : nullptr;
      v[k] = src ? q_pair(src + dim) : 0u;
    }
#pragma unroll
    for (int k = 0; k < kEach; ++k) {
      const int i = t + kMathThreads * k, r = i / 288, col = (i % 288) / 8 * 16 + 2 * (i % 8);
      if (i < kPairs) *reinterpret_cast<u32*>(q + swizzled_offset<kN>(r, col & ~7) + (col & 7) * 2) = v[k];
    }
  }

  // S^T = K Q^T over the tile whose first block is `first` (r: the ring): per block, two ldmatrix.x4
  // give four k steps' A fragments (rows g, g + 8 of the warp's 16 tokens), widened;
  // double-buffered by block parity so one block's loads and widening run under the previous
  // block's wgmma. The rope block goes back to the ring once its fragments are in registers.
  template <class R>
  __device__ static void qk(float (&s)[8], const R& r, typename R::Pos first, int warp, int lane) {
    const u64 dq = desc_k_major<kN>(r.q, 0);
    const int row = warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), half = lane >> 4;
    u32 a[2][4][4];
#pragma unroll
    for (int cb = 0; cb < 9; ++cb) {
      u32 (&ab)[4][4] = a[cb % 2];
      const typename R::Pos b = R::step(first, cb);
      r.wait(b);
      const unsigned char* blk = r.block(b);
      if (cb >= 2) wgmma_wait<1>();  // block cb - 2's wgmma, which read this buffer, are done
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 x[4];
        ldmatrix_x4(x, blk + sw64(row, 2 * h + half));
        // x[0], x[1]: rows g, g + 8 of chunk 2h; x[2], x[3]: of chunk 2h + 1.
#pragma unroll
        for (int y = 0; y < 2; ++y) {
          u32(&f)[4] = ab[2 * h + y];
          MlaHopperFp8<Tr>::widen4(x[2 * y], f[0], f[2]);
          MlaHopperFp8<Tr>::widen4(x[2 * y + 1], f[1], f[3]);
        }
      }
      if (cb == 8) r.release(b, lane);  // (the widened fragments hold what the rope block held)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_fence_operands(ab[kk]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int k0 = cb * 64 + kk * 16;
        Wgmma<half_t, kN>::rs(s, ab[kk], desc_step(dq, k_major_offset<kN>(k0)), k0 > 0);
      }
      wgmma_commit();
    }
  }

  // O^T += V^T P^T: per 64-dim block, two ldmatrix.x4.trans give the warp's 16 dims x the
  // tile's 64 tokens; a word holds (token t, t + 1) x (dim 2g, 2g + 1): permuted to one
  // pair of tokens a dim and widened. Tokens at or past `valid` become 0 (their rows may
  // hold anything, and V meets P = 0 there: 0 * NaN is NaN).
  // Each V block goes back to the ring once its fragments are in registers.
  template <bool kMask, class R>
  __device__ static void pv(float (&o)[8][8], const R& r, typename R::Pos first, u32 pt, int valid, int warp, int lane) {
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
        u32 x4[4];
        ldmatrix_x4_trans(x4, r.block(R::step(first, mb)) + sw64(tok, warp));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          // Thread's tokens in matrix i: t0 = base + 2q, t1 = t0 + 1; bytes after the permute:
          // (t0, d0), (t1, d0), (t0, d1), (t1, d1).
          const int t0 = 32 * kp + 8 * i + 2 * q;
          u32 x;
          asm("prmt.b32 %0, %1, 0, 0x3120;" : "=r"(x) : "r"(x4[i]));
          if constexpr (kMask) x &= (t0 < valid ? 0x00ff00ffu : 0u) | (t0 + 1 < valid ? 0xff00ff00u : 0u);
          // k step 2 kp + i / 2; registers: rows g (dim 2g) / g + 8 (dim 2g + 1), tokens
          // 2q, 2q + 1 (i even) or 2q + 8, 2q + 9 (i odd).
          u32(&f)[4] = ab[2 * kp + i / 2];
          MlaHopperFp8<Tr>::widen4(x, f[(i % 2) * 2], f[(i % 2) * 2 + 1]);
        }
      }
      r.release(R::step(first, mb), lane);
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

  // Warpgroup wg: tiles wg, wg + 2, ... from the ring r; on return m is its columns' max,
  // l this thread's share of their sums, o its O^T (relative to m; rows as finish<true> reads).
  template <class R>
  __device__ static void consume(const MlaParams& p, const Work& w, const R& r, int wg, int tid, const int (&limit)[4],
                                 int lim_min, float scale_log2, float (&o)[8][8], float (&m)[4], float (&l)[4]) {
    const int warp = tid / 32, lane = tid % 32;
    const u32 pt = r.pt + wg * kPBytes;
    typename R::Pos t0 = R::at(9 * wg);  // the tile's first block
    for (int it = wg; it < w.n_tiles; it += 2, t0 = R::step(t0, 18)) {
      bool key[2] = {true, true};
      if constexpr (Tr::kSparse)
#pragma unroll
        for (int h = 0; h < 2; ++h) key[h] = Io::lookup(p, w, w.lo + it * kTile + Base::frag_row(2 * h, warp, lane)) >= 0;
      float s[8];
      qk(s, r, t0, warp, lane);
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      float alpha[4];
      Base::softmax(s, key, it, limit, lim_min, scale_log2, m, l, alpha, r.st + wg * 4 * kN, wg, warp, lane);
      Base::store_pt(pt, s, warp, lane);
      fence_proxy_async_shared();  // P^T: generic stores, read by the wgmma
      named_barrier_sync(kColBar + wg, 128);
      Base::rescale(o, alpha);
      // Tokens past the range exist only in the last tile: the others skip the masks.
      const int valid = w.hi - w.lo - it * kTile;
      if (valid >= kTile)
        pv<false>(o, r, t0, pt, valid, warp, lane);
      else
        pv<true>(o, r, t0, pt, valid, warp, lane);
      wgmma_wait<0>();
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) wgmma_fence_operands(o[mb]);
    }
  }
};

}  // namespace attnjit
