// One warp's tensor-core work on one KV tile of the GQA decode kernel:
// S = Q K^T (16 query rows x kTile tokens) and O += P V, for 16-bit KV read with
// ldmatrix and for fp8 KV widened in registers straight from ldmatrix.
#pragma once

#include "common/dtype.cuh"
#include "common/mma.cuh"

namespace attnjit {

// Byte offset of (row, byte column) in a raw KV tile of the ring: 16-byte chunks
// XOR-swizzled by row where Traits::kSwizzleRaw, else padded rows. An ldmatrix reads one
// chunk column of eight rows, which must fall on the eight 16-byte banks of a 128-byte
// period: each run of n = min(chunks a row, 8) chunks is XORed with row / (8 / n), so
// the 8 / n rows that share a period take different chunks.
template <class Tr>
__device__ __forceinline__ int raw_offset(int row, int col) {
  constexpr int kChunks = Tr::kRowDataBytes / 16, kN = kChunks < 8 ? kChunks : 8;
  if constexpr (Tr::kSwizzleRaw)
    return row * Tr::kRawRowBytes + ((((col >> 4) ^ (row / (8 / kN))) & (kN - 1)) | ((col >> 4) & ~(kN - 1))) * 16 +
           (col & 15);
  else return row * Tr::kRawRowBytes + col;
}

template <class Tr>
struct DecodeTile {
  using KVT = typename Tr::KVT;
  using MT = typename Tr::MT;
  static constexpr int HD = Tr::kHeadDim, kTile = Tr::kTile, kRowElems = Tr::kRowElems;
  static constexpr int kN = kTile / 8;  // n tiles of 8 tokens in S

  // The A operand of k-step ks: from registers when Q fits there, else shared memory
  // (q_s: the M tile's first row).
  template <bool kQRegs = Tr::kQInRegs, class QF>
  __device__ static void q_frag(const QF& qf, const MT* q_s, int ks, int lane, u32 (&a)[4]) {
    if constexpr (kQRegs) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = qf[ks][i];
    } else {
      ldmatrix_x4(a, q_s + ((lane % 8) + ((lane / 8) % 2) * 8) * kRowElems + ks * 16 + (lane / 16) * 8);
    }
  }

  // S = Q K^T. kt: the tile as MMA operands; k_raw: the fp8 bytes (direct path).
  template <class QF>
  __device__ static void scores(const QF& qf, const MT* q_s, const MT* kt, const unsigned char* k_raw, int lane,
                                float (&s)[kN][4]) {
    scores_m<1, Tr::kQInRegs>(qf, q_s, kt, k_raw, lane, reinterpret_cast<float(&)[1][kN][4]>(s));
  }

  // S = Q K^T for kM 16-row M tiles (Q rows 16 apart in q_s): each K fragment is read
  // (and widened) once and feeds kM MMAs (dual-M: decode_dual_m.cuh).
  template <int kM, bool kQRegs, class QF>
  __device__ static void scores_m(const QF& qf, const MT* q_s, const MT* kt, const unsigned char* k_raw, int lane,
                                  float (&s)[kM][kN][4]) {
    static_assert(kM == 1 || (!kQRegs && !Tr::kInt4Kv), "several M tiles: Q from shared memory, 16-bit or fp8 K");
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int n = 0; n < kN; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
    if constexpr (Tr::kInt4Kv) {
      // One ldmatrix: 16 tokens x 64 dims; word r[2h + n] holds tokens 8n.. of dims 32h..,
      // lane quad t's dims 8t..8t+7 (Q permuted to match: GqaDecode::q_col).
#pragma unroll
      for (int k0 = 0; k0 < HD; k0 += 64) {
#pragma unroll
        for (int tg = 0; tg < kTile / 16; ++tg) {
          u32 r[4];
          ldmatrix_x4(r, k_raw + raw_offset<Tr>(tg * 16 + (lane % 8) + ((lane / 8) % 2) * 8, k0 / 2 + (lane / 16) * 16));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            u32 a0[4], a1[4];
            q_frag<kQRegs>(qf, q_s, (k0 + 32 * h) / 16, lane, a0);
            q_frag<kQRegs>(qf, q_s, (k0 + 32 * h) / 16 + 1, lane, a1);
#pragma unroll
            for (int n = 0; n < 2; ++n) {
              u32 b[4];
              int4x8_to_half2(r[2 * h + n], b);
              mma_16816<MT>(s[0][2 * tg + n], a0, b[0], b[1]);
              mma_16816<MT>(s[0][2 * tg + n], a1, b[2], b[3]);
            }
          }
        }
      }
    } else if constexpr (Tr::kDirectFp8) {
#pragma unroll
      for (int k0 = 0; k0 < HD; k0 += 32) {
        u32 a0[kM][4], a1[kM][4];
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          q_frag<kQRegs>(qf, q_s + mt * 16 * kRowElems, k0 / 16, lane, a0[mt]);
          q_frag<kQRegs>(qf, q_s + mt * 16 * kRowElems, k0 / 16 + 1, lane, a1[mt]);
        }
#pragma unroll
        for (int tg = 0; tg < kTile / 16; ++tg) {
          u32 r[4];
          ldmatrix_x4(r, k_raw + raw_offset<Tr>(tg * 16 + (lane % 8) + ((lane / 8) % 2) * 8, k0 + (lane / 16) * 16));
          u32 b[4][2];
#pragma unroll
          for (int i = 0; i < 4; ++i) b[i][0] = widen_lo(KVT{}, r[i]), b[i][1] = widen_hi(KVT{}, r[i]);
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            mma_16816<MT>(s[mt][2 * tg], a0[mt], b[0][0], b[0][1]);
            mma_16816<MT>(s[mt][2 * tg + 1], a0[mt], b[1][0], b[1][1]);
            mma_16816<MT>(s[mt][2 * tg], a1[mt], b[2][0], b[2][1]);
            mma_16816<MT>(s[mt][2 * tg + 1], a1[mt], b[3][0], b[3][1]);
          }
        }
      }
    } else {
#pragma unroll
      for (int k0 = 0; k0 < HD; k0 += 16) {
        u32 a[kM][4];
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) q_frag<kQRegs>(qf, q_s + mt * 16 * kRowElems, k0 / 16, lane, a[mt]);
#pragma unroll
        for (int tg = 0; tg < kTile / 16; ++tg) {
          u32 bk[4];
          ldmatrix_x4(bk, kt + (tg * 16 + (lane % 8) + (lane / 16) * 8) * kRowElems + k0 + ((lane / 8) % 2) * 8);
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            mma_16816<MT>(s[mt][2 * tg], a[mt], bk[0], bk[1]);
            mma_16816<MT>(s[mt][2 * tg + 1], a[mt], bk[2], bk[3]);
          }
        }
      }
    }
  }

  // O += P V, P being the probabilities left in s (the accumulator layout of S
  // is the A-operand layout of P), over DW dims from d_lo (split-D: a warp's slice).
  // Direct fp8 and int4 leave O's dims interleaved: store_o puts them back.
  template <int DW = HD>
  __device__ static void accumulate_pv(const float (&s)[kN][4], const MT* vt, const unsigned char* v_raw, int lane,
                                       float (&o)[DW / 8][4], int d_lo = 0) {
    accumulate_pv_m<1, DW>(reinterpret_cast<const float(&)[1][kN][4]>(s), vt, v_raw, lane,
                           reinterpret_cast<float(&)[1][DW / 8][4]>(o), d_lo);
  }

  // O += P V for kM 16-row M tiles: each V fragment is read (and widened) once.
  template <int kM, int DW = HD>
  __device__ static void accumulate_pv_m(const float (&s)[kM][kN][4], const MT* vt, const unsigned char* v_raw,
                                         int lane, float (&o)[kM][DW / 8][4], int d_lo = 0) {
    static_assert(!Tr::kInt4Kv || DW == HD, "int4 V: every dim (no split-D)");
    static_assert(kM == 1 || !Tr::kInt4Kv, "several M tiles: 16-bit or fp8 V");
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      u32 a[kM][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        a[mt][0] = pack2<MT>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2<MT>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2<MT>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<MT>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
      if constexpr (Tr::kInt4Kv) {
        // ldmatrix.trans on 4-dim units: lane (g, t) gets tokens 2t, 2t+1 of dims 4g..4g+3
        // (r[2h]: tokens 0-7, r[2h+1]: 8-15, of dims c0 + 32h..); nibble j of both tokens
        // is n tile j, which so holds dims 4n + j (store_o below puts them back).
#pragma unroll
        for (int c0 = 0; c0 < HD; c0 += 64) {
          u32 r[4];
          ldmatrix_x4_trans(r, v_raw + raw_offset<Tr>(kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c0 / 2 + (lane / 16) * 16));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            u32 lo[4], hi[4];
            int4x8_to_half2(r[2 * h], lo);
            int4x8_to_half2(r[2 * h + 1], hi);
            const int j0 = (c0 + 32 * h) / 8;
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_16816<MT>(o[0][j0 + j], a[0], lo[j], hi[j]);
          }
        }
      } else if constexpr (Tr::kDirectFp8) {
        // ldmatrix.trans on byte pairs: lane (g, t) gets tokens 2t, 2t+1 of dims 2g
        // and 2g+1; split them into an even-dim and an odd-dim n tile.
#pragma unroll
        for (int c0 = 0; c0 < DW; c0 += 32) {
          u32 r[4];
          ldmatrix_x4_trans(r, v_raw + raw_offset<Tr>(kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8,
                                                      d_lo + c0 + (lane / 16) * 16));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int j = (c0 / 16 + h) * 2;
            const u32 lo = r[2 * h], hi = r[2 * h + 1];
            const u32 e0 = widen_sel(KVT{}, lo, 0x0020), e1 = widen_sel(KVT{}, hi, 0x0020);
            const u32 d0 = widen_sel(KVT{}, lo, 0x0031), d1 = widen_sel(KVT{}, hi, 0x0031);
#pragma unroll
            for (int mt = 0; mt < kM; ++mt) {
              mma_16816<MT>(o[mt][j], a[mt], e0, e1);
              mma_16816<MT>(o[mt][j + 1], a[mt], d0, d1);
            }
          }
        }
      } else {
#pragma unroll
        for (int n0 = 0; n0 < DW; n0 += 16) {
          u32 bv[4];
          ldmatrix_x4_trans(bv, vt + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kRowElems + d_lo + n0 +
                                    (lane / 16) * 8);
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            mma_16816<MT>(o[mt][n0 / 8], a[mt], bv[0], bv[1]);
            mma_16816<MT>(o[mt][n0 / 8 + 1], a[mt], bv[2], bv[3]);
          }
        }
      }
    }
  }

  // One warp's O over DW dims (every dim, or split-D's slice) -> rows g and g + 8 of
  // dst (rows HD floats apart, dst at the warp's first dim), the direct fp8 and int4
  // paths' interleaved dims put back in order.
  template <int DW = HD>
  __device__ static void store_o(float* dst, const float (&o)[DW / 8][4], int tq) {
    if constexpr (Tr::kInt4Kv) {
      // n tile 4b + j of 32-dim block b holds dims 32b + 4n + j: this lane's n are 2t and 2t + 1.
#pragma unroll
      for (int b = 0; b < DW / 32; ++b)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float* r0 = dst + b * 32 + 8 * tq + j;
          r0[0] = o[4 * b + j][0];
          r0[4] = o[4 * b + j][1];
          r0[8 * HD] = o[4 * b + j][2];
          r0[8 * HD + 4] = o[4 * b + j][3];
        }
    } else if constexpr (Tr::kDirectFp8) {
#pragma unroll
      for (int q = 0; q < DW / 16; ++q) {
        float* r0 = dst + q * 16 + 4 * tq;
        r0[0] = o[2 * q][0];
        r0[1] = o[2 * q + 1][0];
        r0[2] = o[2 * q][1];
        r0[3] = o[2 * q + 1][1];
        r0[8 * HD + 0] = o[2 * q][2];
        r0[8 * HD + 1] = o[2 * q + 1][2];
        r0[8 * HD + 2] = o[2 * q][3];
        r0[8 * HD + 3] = o[2 * q + 1][3];
      }
    } else {
#pragma unroll
      for (int j = 0; j < DW / 8; ++j) {
        float* r0 = dst + j * 8 + 2 * tq;
        r0[0] = o[j][0];
        r0[1] = o[j][1];
        r0[8 * HD] = o[j][2];
        r0[8 * HD + 1] = o[j][3];
      }
    }
  }
};

}  // namespace attnjit
