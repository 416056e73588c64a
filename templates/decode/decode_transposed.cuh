// The decode kernel's transposed warp tile (DecodeTraits::kTransposed: int8 / int4 K/V at
// group <= 8, one query row per head): S^T = K Q^T puts the tile's tokens in the MMA's M
// (16) and the group's heads in N (8), and O^T += V^T P^T the head dims in M. The
// row-major tile (decode_tile.cuh) pads the group to 16 MMA rows, 8-15 always padding
// here; this tile has half its MMAs, softmax elements and O registers for the same bytes
// and the same widening. Its operands are the row-major tile's fragments regrouped:
// - S^T's A fragment (tokens x dims) is K's B fragments of the tile's two 8-token halves;
// - Q^T's B fragment is rows 0-7 of Q's A fragment (a0, a2), with Q's dims permuted as
//   GqaDecode::q_col says, since K's dims arrive in that order;
// - P^T's B fragment is S^T's accumulators as 16-bit pairs transposed by movmatrix;
// - V^T's A fragment (dims x tokens) is V's B fragments of two n tiles.
// A thread holds tokens g and g + 8 of each 16 and heads 2t and 2t + 1 (t = lane % 4), so
// a head's max and sum reduce over the eight lanes of one t (xor 4, 8, 16).
// kvpair (Traits::kKvPack 2, int4): the 8 columns hold two KV heads' groups and a stage
// row both heads' rows. S^T sums head 0's dims against Q^T with head 1's columns zeroed
// and head 1's against the reverse (GqaDecode::q_src_row); O^T += V_h^T P^T takes P^T
// with the other head's columns zeroed, so both heads share S^T's and O^T's registers.
#pragma once

#include "common/dtype.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "decode/decode_params.cuh"
#include "decode/decode_tile.cuh"
#include "decode/decode_token_scales.cuh"

namespace attnjit {

__device__ __forceinline__ u32 movmatrix_trans(u32 x) {
  u32 y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
// A value's max / sum over the eight lanes that share lane % 4 (one head's tokens).
__device__ __forceinline__ float column_max(float x) {
#pragma unroll
  for (int off = 4; off < 32; off *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float column_sum(float x) {
#pragma unroll
  for (int off = 4; off < 32; off *= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

template <class Tr>
struct DecodeTransposed {
  using KVT = typename Tr::KVT;
  using MT = typename Tr::MT;
  using Dec = GqaDecode<Tr>;
  using Work = typename Dec::Work;
  using Tok = DecodeTokenScales<Tr>;
  static constexpr int HD = Tr::kHeadDim, kTile = Tr::kTile, kRows = Tr::kRows, W = Tr::kWarps;
  static constexpr int kM = kTile / 16;  // S^T m tiles of 16 tokens
  static constexpr int kMo = HD / 16;    // O^T m tiles of 16 dims
  static constexpr int kPack = Tr::kKvPack, kRowDims = HD * kPack;  // a stage row's dims
  static_assert(Tr::kTransposed && HD % 32 == 0, "the transposed tile: int8 / int4 K/V, whole 32-dim chunks");

  // The dim of O^T's m tile mt, row r (0-15): direct int8 puts a 16-dim block's even dims
  // in rows 0-7 and its odd dims in 8-15; int4 puts dims 4g + 2 (mt % 2) and + 1 of its
  // 32-dim block in rows g and g + 8 (DecodeTile's n tiles, two to an m tile).
  __device__ static constexpr int o_dim(int mt, int r) {
    if (Tr::kInt4Kv) return 32 * (mt / 2) + 4 * (r % 8) + 2 * (mt % 2) + r / 8;
    return 16 * mt + 2 * (r % 8) + r / 8;
  }

  // Q^T's B fragments of k steps ks and ks + 1, from rows 0-7 of q_s.
  __device__ static void load_qt_pair(const MT* q_s, int lane, int ks, u32 (&qb)[HD / 16][2]) {
    u32 r[4];
    ldmatrix_x4(r, q_s + (lane % 8) * Tr::kRowElems + ks * 16 + (lane / 8) * 8);
    qb[ks][0] = r[0];
    qb[ks][1] = r[1];
    qb[ks + 1][0] = r[2];
    qb[ks + 1][1] = r[3];
  }
  // int4 reads Q^T from shared memory in each tile (four ldmatrix at hd128), as measured
  // on the H200; held in registers it compiles without spills too and saves ~12 of ~490
  // instructions a 32-token tile (not measured yet). int8 keeps it in registers.
  static constexpr bool kQtPerTile = Tr::kInt4Kv;
  static_assert(kPack == 1 || kQtPerTile, "kvpair reads each head's Q^T per tile");
  __device__ static void load_qt(const MT* q_s, int lane, u32 (&qb)[HD / 16][2]) {
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks += 2) load_qt_pair(q_s, lane, ks, qb);
  }

  // K's widening stops short of its subtractions (int8_pick_biased, int4x8_to_half2_biased):
  // column c of the stored Q (q_s, in MMA k order) meets k + k_bias(c), and int4's
  // columns 8-15 of each 16 (pairs 1 and 3, 16 k + 1152) hold q / 16 (GqaDecode::load_q).
  // The bias adds sum_c q_c k_bias(c) to all of a head's scores, which softmax drops;
  // per-token K scales multiply each key's score, so there it is taken off (kbias).
  __device__ static constexpr float k_bias(int c) { return Tr::kInt4Kv && c % 16 < 8 ? 1032.f : 1152.f; }
  __device__ static constexpr float q_unscale(int c) { return Tr::kInt4Kv && c % 16 >= 8 ? 16.f : 1.f; }

  // S^T = K Q^T over the tile: st[m] holds tokens 16m + g (+ 8) x heads 2t, 2t + 1.
  __device__ static void scores(u32 (&qb)[HD / 16][2], const MT* q_s, const unsigned char* k_raw, int lane,
                                float (&st)[kM][4]) {
#pragma unroll
    for (int m = 0; m < kM; ++m) st[m][0] = st[m][1] = st[m][2] = st[m][3] = 0.f;
    const int row = (lane % 8) + ((lane / 8) % 2) * 8;
    if constexpr (Tr::kInt4Kv) {
#pragma unroll
      for (int k0 = 0; k0 < kRowDims; k0 += 64) {  // k0: the stage row's dim; head k0 / HD's dim k0 % HD
        const int kq = k0 % HD;
        if constexpr (kQtPerTile) {
          const MT* qh = q_s + (k0 / HD) * 8 * Tr::kRowElems;  // kvpair: rows 8-15 are head 1's Q^T
          load_qt_pair(qh, lane, kq / 16, qb);
          load_qt_pair(qh, lane, kq / 16 + 2, qb);
        }
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          u32 r[4];  // r[2h + n]: tokens 8n.. of dims k0 + 32h.. (DecodeTile::scores)
          ldmatrix_x4(r, k_raw + raw_offset<Tr>(m * 16 + row, k0 / 2 + (lane / 16) * 16));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            u32 b0[4], b1[4];
            int4x8_to_half2_biased(r[2 * h], b0);
            int4x8_to_half2_biased(r[2 * h + 1], b1);
            const int ks = (kq + 32 * h) / 16;
            const u32 a0[4] = {b0[0], b1[0], b0[1], b1[1]}, a1[4] = {b0[2], b1[2], b0[3], b1[3]};
            mma_16816<MT>(st[m], a0, qb[ks][0], qb[ks][1]);
            mma_16816<MT>(st[m], a1, qb[ks + 1][0], qb[ks + 1][1]);
          }
        }
      }
    } else {
#pragma unroll
      for (int k0 = 0; k0 < HD; k0 += 32)
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          u32 r[4];  // r[0] / r[1]: tokens 0-7 / 8-15 of dims k0.., r[2] / r[3] of k0 + 16..
          ldmatrix_x4(r, k_raw + raw_offset<Tr>(m * 16 + row, k0 + (lane / 16) * 16));
          const u32 a0[4] = {int8_pick_biased(r[0], 0x10), int8_pick_biased(r[1], 0x10), int8_pick_biased(r[0], 0x32),
                             int8_pick_biased(r[1], 0x32)};
          const u32 a1[4] = {int8_pick_biased(r[2], 0x10), int8_pick_biased(r[3], 0x10), int8_pick_biased(r[2], 0x32),
                             int8_pick_biased(r[3], 0x32)};
          mma_16816<MT>(st[m], a0, qb[k0 / 16][0], qb[k0 / 16][1]);
          mma_16816<MT>(st[m], a1, qb[k0 / 16 + 1][0], qb[k0 / 16 + 1][1]);
        }
    }
  }

  // O^T += V^T P^T, P^T being the probabilities left in st.
  __device__ static void accumulate_pv(const float (&st)[kM][4], const unsigned char* v_raw, int lane,
                                       float (&ot)[kMo][4]) {
    const int row = (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const u32 pt0 = movmatrix_trans(pack2<MT>(st[m][0], st[m][1]));  // tokens 0-7 of the 16
      const u32 pt1 = movmatrix_trans(pack2<MT>(st[m][2], st[m][3]));  // tokens 8-15
      if constexpr (Tr::kInt4Kv) {
#pragma unroll
        for (int c0 = 0; c0 < kRowDims; c0 += 64) {
          // P^T's column (lane / 4) kept only where it is head c0 / HD's (kvpair).
          const bool mine = kPack == 1 || (lane / 4) / Tr::kGroup == c0 / HD;
          const u32 pb0 = mine ? pt0 : 0u, pb1 = mine ? pt1 : 0u;
          u32 r[4];  // r[2h]: tokens 0-7, r[2h + 1]: 8-15, of dims c0 + 32h.. (DecodeTile::accumulate_pv)
          ldmatrix_x4_trans(r, v_raw + raw_offset<Tr>(m * 16 + row, c0 / 2 + (lane / 16) * 16));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            u32 lo[4], hi[4];
            int4x8_to_half2_biased<0>(r[2 * h], lo);  // subnormals: unbias_v
            int4x8_to_half2_biased<0>(r[2 * h + 1], hi);
            const int mt = (c0 % HD + 32 * h) / 16;
            const u32 a0[4] = {lo[0], lo[1], hi[0], hi[1]}, a1[4] = {lo[2], lo[3], hi[2], hi[3]};
            mma_16816<MT>(ot[mt], a0, pb0, pb1);
            mma_16816<MT>(ot[mt + 1], a1, pb0, pb1);
          }
        }
      } else {
        const u32 pb0 = pt0, pb1 = pt1;
#pragma unroll
        for (int c0 = 0; c0 < HD; c0 += 32) {
          u32 r[4];  // lane (g, t): tokens 2t, 2t + 1 of dims 2g, 2g + 1; r[2h] tokens 0-7, r[2h + 1] 8-15
          ldmatrix_x4_trans(r, v_raw + raw_offset<Tr>(m * 16 + row, c0 + (lane / 16) * 16));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const u32 lo = r[2 * h], hi = r[2 * h + 1];
            const u32 a[4] = {widen_sel(KVT{}, lo, 0x0020), widen_sel(KVT{}, lo, 0x0031), widen_sel(KVT{}, hi, 0x0020),
                              widen_sel(KVT{}, hi, 0x0031)};
            mma_16816<MT>(ot[c0 / 16 + h], a, pb0, pb1);
          }
        }
      }
    }
  }

  // int4 V enters P V as fp16 subnormals (x + 8) 2^-24, and (x + 8) 2^-20 in the rows of
  // the odd dims (pairs 1 and 3: accumulators 2 and 3), with no subtractions in the loop.
  // The bias is taken off once the tile loop ends: 8 times the sum of P (bias_sum, the
  // rows' l; with per-token V scales the sum of P', folded into the offsets' sums). The
  // P that the MMA reads is P rounded to fp16, so the bias leaves 8 * 2^-12 of l at most.
  static constexpr float kVBias = Tr::kInt4Kv ? 8.f : 0.f;
  __device__ static void unbias_v(float (&ot)[kMo][4], float bias_sum0, float bias_sum1) {
#pragma unroll
    for (int mt = 0; mt < kMo; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        ot[mt][e] = ot[mt][e] * (e < 2 ? 0x1p24f : 0x1p20f) - kVBias * (e & 1 ? bias_sum1 : bias_sum0);
  }

  // V's per-token scales in P^T: DecodeTokenScales::VUnit's unit and P', with a tile's
  // scales gathered and its offsets (less int4's bias) summed by column.
  struct VUnit : Tok::VUnit {
    __device__ __forceinline__ float scale_p(float pe, const float* ts, int j, int h) {
      pe *= ts[2 * kTile + j] * this->mul;
      this->off[h] += pe * (ts[3 * kTile + j] - kVBias);
      return pe;
    }
    // The unit covers both heads' V scales under tokhead (one unit a thread's columns).
    __device__ __forceinline__ void begin_tile(const float* ts, int g, float (&alpha)[2]) {
      float amax = 0.f;
#pragma unroll
      for (int hh = 0; hh < Tr::kTokHeads; ++hh)
#pragma unroll
        for (int j = g; j < kTile; j += 8) amax = fmaxf(amax, fabsf(ts[hh * Tok::kBlock + 2 * kTile + j]));
      this->grow(column_max(amax), alpha);
    }
    __device__ void finish(float (&ot)[kMo][4]) const {
      const float sum[2] = {column_sum(this->off[0]), column_sum(this->off[1])};
#pragma unroll
      for (int mt = 0; mt < kMo; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) ot[mt][e] = (ot[mt][e] + sum[e & 1]) * this->unit;
    }
  };

  // Scale (per-token K scales, soft cap, ALiBi) the tile's scores into log2 units, with
  // kTestKeys the per-key visibility; mx takes each of the thread's two heads' maxima.
  // The per-token scales of column c's KV head: the stage's block of that head of the
  // pair under tokhead (columns past the pair's 2 x group read the second's: masked), else
  // the one block.
  __device__ static __forceinline__ const float* column_scales(const float* ts, int tq, int c) {
    if constexpr (Tr::kTokHeads == 1) return ts;
    return ts + ((2 * tq + c) / Tr::kGroup > 0 ? Tok::kBlock : 0);
  }

  template <bool kTestKeys>
  __device__ static __forceinline__ void scale_tile(const DecodeParams& p, const Work& w, float (&st)[kM][4], int tok0,
                                                    const float* ts, const float (&kbias)[2], const float (&qsum)[2],
                                                    const float (&slope)[2], const int (&q_pos)[2], float scale_log2,
                                                    float (&mx)[2]) {
    const int g = (threadIdx.x % 32) / 4, tq = threadIdx.x % 4;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = e & 1, j = mi * 16 + g + 8 * (e / 2), tok = tok0 + j;
        float x = st[mi][e];
        if constexpr (Tr::kKTok) x = Tok::key_score(x - kbias[c], column_scales(ts, tq, c), j, qsum[c]);
        if (Dec::has(feat::kSoftCap)) x = p.soft_cap * tanhf(x * w.score_scale / p.soft_cap) * kLog2e;
        else x *= scale_log2;
        if (Tr::kPos == pos_mode::kAlibi) x += slope[c] * float(tok - q_pos[c]);
        if (kTestKeys) x = Dec::visible(p, w, 2 * tq + c, tok) ? x : kNegInf;
        st[mi][e] = x;
        mx[c] = fmaxf(mx[c], x);
      }
  }

  // The warp's tiles, then its partial (max, sum, O) rows 0-7 into the merge buffers.
  __device__ static void run(const DecodeParams& p, const Work& w, const MT* q_s, unsigned char* loop_s, int warp,
                             int lane, float* red_o, float* red_m, float* red_l) {
    const int g = lane / 4, tq = lane % 4;
    u32 qb[HD / 16][2];
    if constexpr (!kQtPerTile) load_qt(q_s, lane, qb);
    float ot[kMo][4];
#pragma unroll
    for (int mt = 0; mt < kMo; ++mt) ot[mt][0] = ot[mt][1] = ot[mt][2] = ot[mt][3] = 0.f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
    // This thread's heads (rows of the CTA's 16): 2t and 2t + 1.
    float slope[2] = {0.f, 0.f}, qsum[2] = {0.f, 0.f}, kbias[2] = {0.f, 0.f};
    int q_pos[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int gr = w.rb * kRows + 2 * tq + c;
      q_pos[c] = w.seq_len - w.q_len + Dec::row_token(gr);
      if (Tr::kPos == pos_mode::kAlibi) slope[c] = alibi_slope(Dec::row_q_head(w, gr), p.num_kv_heads * Tr::kGroup) * kLog2e;
      if constexpr (Tr::kKTok) {  // K's offsets need each head's sum of q, its scales the bias off
        for (int d = g; d < HD; d += 8) {
          const float q = to_float(q_s[Dec::q_smem_row(2 * tq + c) * Tr::kRowElems + d]);
          qsum[c] += q * q_unscale(d);
          kbias[c] += q * k_bias(d);
        }
        qsum[c] = column_sum(qsum[c]);
        kbias[c] = column_sum(kbias[c]);
      }
    }
    VUnit vu;
    const float scale_log2 = w.score_scale * kLog2e;  // one multiply a score without a soft cap

    Dec::walk_ring(p, w, loop_s, warp, lane, [&](int tok0, unsigned char* stage) {
      const unsigned char* k_raw = stage;
      const unsigned char* v_raw = stage + kTile * Tr::kRawRowBytes;
      const float* ts = reinterpret_cast<const float*>(stage + 2 * kTile * Tr::kRawRowBytes);
      float st[kM][4];
      scores(qb, q_s, k_raw, lane, st);

      // Whole tiles that every row sees skip the per-key test (a warp-uniform branch).
      float mx[2] = {kNegInf, kNegInf};
      if (Dec::seen_whole(p, w, tok0)) scale_tile<false>(p, w, st, tok0, ts, kbias, qsum, slope, q_pos, scale_log2, mx);
      else scale_tile<true>(p, w, st, tok0, ts, kbias, qsum, slope, q_pos, scale_log2, mx);
      float ref[2], alpha[2];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float m_new = fmaxf(m[c], column_max(mx[c]));
        ref[c] = safe_ref(m_new);
        alpha[c] = m[c] == kNegInf ? 0.f : fast_exp2(m[c] - ref[c]);
        m[c] = m_new;
        l[c] *= alpha[c];
      }
      if constexpr (Tr::kVTok) vu.begin_tile(ts, g, alpha);
      if (!Tr::kLazyRescale || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int mt = 0; mt < kMo; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) ot[mt][e] *= alpha[e & 1];
      }
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float pe = fast_exp2(st[mi][e] - ref[e & 1]);
          l[e & 1] += pe;
          if constexpr (Tr::kVTok) pe = vu.scale_p(pe, column_scales(ts, tq, e & 1), mi * 16 + g + 8 * (e / 2), e & 1);
          st[mi][e] = pe;
        }
      accumulate_pv(st, v_raw, lane, ot);
    });
#pragma unroll
    for (int c = 0; c < 2; ++c) l[c] = column_sum(l[c]);
    if constexpr (Tr::kInt4Kv) unbias_v(ot, Tr::kVTok ? 0.f : l[0], Tr::kVTok ? 0.f : l[1]);
    if constexpr (Tr::kVTok) vu.finish(ot);

    cp_async_wait<0>();
    __syncthreads();  // the ring is now reused for the warp merge
    pdl_launch_dependents();
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (g == 0) {
        red_m[warp * kRows + 2 * tq + c] = m[c];
        red_l[warp * kRows + 2 * tq + c] = l[c];
      }
    }
    // Rows 8-15 of the merge buffers are never read: at most 8 rows are valid.
    float* dst = red_o + warp * kRows * HD;
#pragma unroll
    for (int mt = 0; mt < kMo; ++mt) {
      const int d0 = o_dim(mt, g);  // and d0 + 1 for rows g + 8 (o_dim(mt, g + 8))
      *reinterpret_cast<float2*>(dst + (2 * tq) * HD + d0) = make_float2(ot[mt][0], ot[mt][2]);
      *reinterpret_cast<float2*>(dst + (2 * tq + 1) * HD + d0) = make_float2(ot[mt][1], ot[mt][3]);
    }
  }
};

}  // namespace attnjit
