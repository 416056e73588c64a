// The GQA decode main loop past head_dim 256 (Traits::kSplitD): the warps split
// the head dims instead of the tokens. Warp w owns dims [w * DW, (w + 1) * DW):
// it scores every tile over those dims, the warps' partial scores meet in shared
// memory and every warp sums all W of them in one order (so scores, m and l agree
// bitwise across warps), and it accumulates P V for the same slice of O. O then
// fits a thread's registers as at head_dim 128, and no cross-warp merge of O is
// needed: the warps' slices form one partial row, which DecodeMerge merges as a
// single warp's.
// K/V as stored: each warp copies (cp.async) and reads only its own dims of each
// stage (DecodeCtaRing's kWarpSlices), so a warp waits for its own copies, and the
// score exchange is the one CTA barrier per tile (two partial buffers, alternating).
// RoPE and widened fp8 rewrite whole tiles in shared memory: there the CTA copies
// each tile together, one more barrier per tile.
#pragma once

#include "decode/decode_cta_ring.cuh"
#include "decode/gqa_decode.cuh"

namespace attnjit {

template <class Tr>
struct DecodeSplitD {
  using Base = GqaDecode<Tr>;
  using Work = typename Base::Work;
  using KVT = typename Tr::KVT;
  using MT = typename Tr::MT;
  using Tile = DecodeTile<Tr>;
  static constexpr int HD = Tr::kHeadDim, G = Tr::kGroup, W = Tr::kWarps, S = Tr::kStages;
  static constexpr int kTile = Tr::kTile, kRows = Tr::kRows, kRowElems = Tr::kRowElems, kN = Tile::kN;
  static constexpr int DW = HD / W;  // head dims per warp
  static constexpr bool kWiden = Tr::kFp8Kv && !Tr::kDirectFp8;  // fp8 with RoPE: widened in shared memory
  static constexpr bool kWholeTiles = kWiden || Tr::kPos == pos_mode::kRope;  // rewritten in shared memory
  using Ring = DecodeCtaRing<Tr, S, !kWholeTiles>;
  static_assert(!Tr::kQInRegs, "split-D loads Q through shared memory");
  static_assert(Tr::kScoreBytes == W * kN * 32 * 16 && Tr::kQBytes >= Tr::kScoreBytes,
                "partial scores: one buffer after the ring, the other over Q (in registers by then)");

  // Shared memory: [Q | RoPE freqs | ring of S stages (K tile, V tile) | conv (widened K, V) |
  // partial scores]. Once Q is in registers its bytes hold the second partial-score buffer.
  // After the loop the ring area holds the merge buffer: red_o [kRows][HD], red_m, red_l.
  __device__ static void run(const DecodeParams& p, unsigned char* smem) {
    Work w;
    if (!Base::setup(p, w)) return;
    MT* q_s = reinterpret_cast<MT*>(smem);
    float* freq_s = reinterpret_cast<float*>(smem + Tr::kQBytes);
    unsigned char* ring = smem + Tr::kQBytes + Tr::kFreqBytes;
    MT* conv = reinterpret_cast<MT*>(ring + Tr::kRingBytes);
    float4* part_even = reinterpret_cast<float4*>(ring + Tr::kRingBytes + Tr::kConvBytes);
    float4* part_odd = reinterpret_cast<float4*>(smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n_tiles = (w.tok_hi - w.tok_lo + kTile - 1) / kTile;
    // The first S - 1 tiles are in flight while Q loads (setup read their pages
    // when no window moved the start).
    Ring::prologue(p, w, ring, n_tiles);
    Base::load_q(p, w, q_s, freq_s);
    __syncthreads();  // Q's rows, written by every thread
    u32 qf[DW / 16][4];  // this warp's dims of Q as A fragments, a k-step each
    const MT* q_lane = q_s + ((lane % 8) + ((lane / 8) % 2) * 8) * kRowElems + (lane / 16) * 8 + warp * DW;
#pragma unroll
    for (int j = 0; j < DW / 16; ++j) ldmatrix_x4(qf[j], q_lane + 16 * j);
    // Tile 1's partial scores overwrite Q after tile 0's exchange barrier, which
    // every warp passes only after these reads.

    float o[DW / 8][4];
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < DW / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    loop(p, w, qf, freq_s, ring, conv, part_even, part_odd, warp, lane, n_tiles, o, m, l);

    cp_async_wait<0>();  // only empty groups can be left; no copy may land in the merge buffer
    __syncthreads();     // every warp is done with the ring and the partial scores: reused below
    pdl_launch_dependents();
    float* red_o = reinterpret_cast<float*>(ring);
    float* red_m = red_o + kRows * HD;
    float* red_l = red_m + kRows;
    const int g = lane / 4, tq = lane % 4;
    l[0] = quad_sum(l[0]);
    l[1] = quad_sum(l[1]);
    // Every warp holds the same m and l (bitwise: the same summed scores); warp 0 writes them.
    if (warp == 0 && tq == 0) {
      red_m[g] = m[0];
      red_m[g + 8] = m[1];
      red_l[g] = l[0];
      red_l[g + 8] = l[1];
    }
    Tile::template store_o<DW>(red_o + g * HD + warp * DW, o, tq);
    __syncthreads();
    DecodeMerge<Tr>::merge_and_store(p, w, red_o, red_m, red_l, reinterpret_cast<unsigned*>(smem));
  }

  // This warp's share of S = Q K^T: the whole tile over dims [d_lo, d_lo + DW)
  // (DecodeTile::scores over a slice, Q from registers; fp8 K widened for those dims only).
  __device__ static void scores(const u32 (&qf)[DW / 16][4], const MT* kt, const unsigned char* k_raw, int lane,
                                int d_lo, float (&s)[kN][4]) {
#pragma unroll
    for (int n = 0; n < kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int j = 0; j < DW / 16; ++j) {
      const int k0 = d_lo + 16 * j;
#pragma unroll
      for (int tg = 0; tg < kTile / 16; ++tg) {
        u32 bk[4];
        if constexpr (Tr::kDirectFp8) {
          if (j % 2) continue;  // one ldmatrix reads 32 fp8 dims: two k-steps
          ldmatrix_x4(bk, k_raw + raw_offset<Tr>(tg * 16 + (lane % 8) + ((lane / 8) % 2) * 8, k0 + (lane / 16) * 16));
          mma_16816<MT>(s[2 * tg], qf[j], widen_lo(KVT{}, bk[0]), widen_hi(KVT{}, bk[0]));
          mma_16816<MT>(s[2 * tg + 1], qf[j], widen_lo(KVT{}, bk[1]), widen_hi(KVT{}, bk[1]));
          mma_16816<MT>(s[2 * tg], qf[j + 1], widen_lo(KVT{}, bk[2]), widen_hi(KVT{}, bk[2]));
          mma_16816<MT>(s[2 * tg + 1], qf[j + 1], widen_lo(KVT{}, bk[3]), widen_hi(KVT{}, bk[3]));
        } else {
          ldmatrix_x4(bk, kt + (tg * 16 + (lane % 8) + (lane / 16) * 8) * kRowElems + k0 + ((lane / 8) % 2) * 8);
          mma_16816<MT>(s[2 * tg], qf[j], bk[0], bk[1]);
          mma_16816<MT>(s[2 * tg + 1], qf[j], bk[2], bk[3]);
        }
      }
    }
  }

  // The warps' partial scores into the full ones, the same in every warp: warp j's
  // share is part[(j * kN + n) * 32 + lane], summed over j = 0..W-1 in that order.
  // Tiles alternate buffers, so the next barrier (tile t + 1's) orders these reads
  // before tile t + 2 writes this buffer again. kHalves = 1: rows 0-7 only (rows
  // 8-15 padding, GqaDecode::upper_rows_padding), half the bytes.
  template <int kHalves>
  __device__ static void sum_scores(float4* part, int warp, int lane, float (&s)[kN][4]) {
    float2* half = reinterpret_cast<float2*>(part);
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      if constexpr (kHalves == 2) part[(warp * kN + n) * 32 + lane] = make_float4(s[n][0], s[n][1], s[n][2], s[n][3]);
      else half[(warp * kN + n) * 32 + lane] = make_float2(s[n][0], s[n][1]);
    }
    __syncthreads();
#pragma unroll
    for (int n = 0; n < kN; ++n) {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        float t[4];
        if constexpr (kHalves == 2) {
          const float4 u = part[(j * kN + n) * 32 + lane];
          t[0] = u.x, t[1] = u.y, t[2] = u.z, t[3] = u.w;
        } else {
          const float2 u = half[(j * kN + n) * 32 + lane];
          t[0] = u.x, t[1] = u.y;
        }
#pragma unroll
        for (int e = 0; e < 2 * kHalves; ++e) s[n][e] = j == 0 ? t[e] : s[n][e] + t[e];
      }
    }
  }

  __device__ static void loop(const DecodeParams& p, const Work& w, const u32 (&qf)[DW / 16][4], const float* freq_s,
                              unsigned char* ring, MT* conv, float4* part_even, float4* part_odd, int warp, int lane, int n_tiles,
                              float (&o)[DW / 8][4], float (&m)[2], float (&l)[2]) {
    const int g = lane / 4, tq = lane % 4, d_lo = warp * DW;
    float slope[2] = {0.f, 0.f};
    int q_pos[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int gr = w.rb * kRows + g + 8 * h;
      q_pos[h] = w.seq_len - w.q_len + gr / G;
      if (Tr::kPos == pos_mode::kAlibi) slope[h] = alibi_slope(w.kvh * G + gr % G, p.num_kv_heads * G) * kLog2e;
    }
    auto body = [&](int t, int tok0, unsigned char* stage) {
      const unsigned char* k_raw = stage;
      const unsigned char* v_raw = stage + kTile * Tr::kRawRowBytes;
      MT* kt = reinterpret_cast<MT*>(stage);
      const MT* vt = reinterpret_cast<const MT*>(v_raw);
      if constexpr (kWiden) {
        // conv was last read in tile t - 1, before this tile's barrier.
        Ring::widen_tile(k_raw, conv);
        Ring::widen_tile(v_raw, conv + kTile * kRowElems);
        kt = conv;
        vt = conv + kTile * kRowElems;
        __syncthreads();
      }
      if constexpr (Tr::kPos == pos_mode::kRope) {
        // In place: this stage (or conv) is rewritten only after the next barrier.
        Ring::rope_tile(kt, freq_s, tok0);
        __syncthreads();
      }
      float s[kN][4];
      scores(qf, kt, k_raw, lane, d_lo, s);
      if (Base::upper_rows_padding(w)) {
        sum_scores<1>(t % 2 ? part_odd : part_even, warp, lane, s);
        Base::template online_softmax<1>(p, w, s, tok0, g, tq, slope, q_pos, o, m, l);
      } else {
        sum_scores<2>(t % 2 ? part_odd : part_even, warp, lane, s);
        Base::template online_softmax<2>(p, w, s, tok0, g, tq, slope, q_pos, o, m, l);
      }
      Tile::template accumulate_pv<DW>(s, vt, v_raw, lane, o, d_lo);  // O[:, d_lo : d_lo + DW]
    };
    Ring::for_each_tile(p, w, ring, n_tiles, body);
  }
};

}  // namespace attnjit
