// The GQA decode main loop past head_dim 256 (Traits::kSplitD): the warps split
// the OUTPUT dims instead of the tokens. One cp.async ring serves the whole CTA
// (stages of kTile tokens x head_dim for K and V) with one __syncthreads per tile;
// every warp scores the full tile (QK^T over every dim: redundant across warps,
// cheap in a memory-bound loop, and bitwise identical, so m and l agree) and
// accumulates P V only for its head_dim / W slice of O. O then fits a thread's
// registers as at head_dim 128, and no cross-warp merge of O is needed: the warps'
// slices form one partial row, which DecodeMerge merges as a single warp's.
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
  using Ring = DecodeCtaRing<Tr, Tr::kStages>;
  static constexpr int HD = Tr::kHeadDim, G = Tr::kGroup, W = Tr::kWarps, S = Tr::kStages;
  static constexpr int kTile = Tr::kTile, kRows = Tr::kRows, kRowElems = Tr::kRowElems;
  static constexpr int DW = HD / W;  // output dims per warp
  static constexpr bool kWiden = Tr::kFp8Kv && !Tr::kDirectFp8;  // fp8 with RoPE: widened in shared memory
  static_assert(!Tr::kQInRegs, "split-D reads Q from shared memory");
  __device__ static constexpr bool has(unsigned f) { return (Tr::kFeatures & f) != 0; }

  // Shared memory: [Q | RoPE freqs | ring of S stages (K tile, V tile) | conv (widened K, V)].
  // After the loop the ring area holds the merge buffer: red_o [kRows][HD], red_m, red_l.
  __device__ static void run(const DecodeParams& p, unsigned char* smem) {
    Work w;
    if (!Base::setup(p, w)) return;
    MT* q_s = reinterpret_cast<MT*>(smem);
    float* freq_s = reinterpret_cast<float*>(smem + Tr::kQBytes);
    unsigned char* ring = smem + Tr::kQBytes + Tr::kFreqBytes;
    MT* conv = reinterpret_cast<MT*>(ring + Tr::kRingBytes);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n_tiles = (w.tok_hi - w.tok_lo + kTile - 1) / kTile;
    // The first S - 1 tiles are in flight while Q loads (setup read their pages
    // when no window moved the start).
    Ring::prologue(p, w, ring, n_tiles);
    // Q's shared-memory writes are ordered before every read by the loop's first
    // barrier (or, with no tile, by the barrier after it).
    Base::load_q(p, w, q_s, freq_s);

    float o[DW / 8][4];
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < DW / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    loop(p, w, q_s, freq_s, ring, conv, warp, lane, n_tiles, o, m, l);

    cp_async_wait<0>();  // only empty groups can be left; no copy may land in the merge buffer
    __syncthreads();     // every warp is done with the ring and Q: both are reused below
    pdl_launch_dependents();
    float* red_o = reinterpret_cast<float*>(ring);
    float* red_m = red_o + kRows * HD;
    float* red_l = red_m + kRows;
    const int g = lane / 4, tq = lane % 4;
    l[0] = quad_sum(l[0]);
    l[1] = quad_sum(l[1]);
    // Every warp holds the same m and l (bitwise: the same scores); warp 0 writes them.
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

  // S = Q K^T over the whole tile and every dim, Q from shared memory: DecodeTile::scores,
  // but unrolled 4 k-steps deep rather than HD / 16 (fully unrolled, ptxas hoists
  // every k-step's ldmatrix and runs out of registers at head_dim 512).
  __device__ static void scores(const MT* q_s, const MT* kt, const unsigned char* k_raw, int lane,
                                float (&s)[Tile::kN][4]) {
#pragma unroll
    for (int n = 0; n < Tile::kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    const MT* q_lane = q_s + ((lane % 8) + ((lane / 8) % 2) * 8) * kRowElems + (lane / 16) * 8;
    if constexpr (Tr::kDirectFp8) {
#pragma unroll 2
      for (int k0 = 0; k0 < HD; k0 += 32) {
        u32 a0[4], a1[4];
        ldmatrix_x4(a0, q_lane + k0);
        ldmatrix_x4(a1, q_lane + k0 + 16);
#pragma unroll
        for (int tg = 0; tg < kTile / 16; ++tg) {
          u32 r[4];
          ldmatrix_x4(r, k_raw + raw_offset<Tr>(tg * 16 + (lane % 8) + ((lane / 8) % 2) * 8, k0 + (lane / 16) * 16));
          mma_16816<MT>(s[2 * tg], a0, widen_lo(KVT{}, r[0]), widen_hi(KVT{}, r[0]));
          mma_16816<MT>(s[2 * tg + 1], a0, widen_lo(KVT{}, r[1]), widen_hi(KVT{}, r[1]));
          mma_16816<MT>(s[2 * tg], a1, widen_lo(KVT{}, r[2]), widen_hi(KVT{}, r[2]));
          mma_16816<MT>(s[2 * tg + 1], a1, widen_lo(KVT{}, r[3]), widen_hi(KVT{}, r[3]));
        }
      }
    } else {
#pragma unroll 4
      for (int k0 = 0; k0 < HD; k0 += 16) {
        u32 a[4];
        ldmatrix_x4(a, q_lane + k0);
#pragma unroll
        for (int tg = 0; tg < kTile / 16; ++tg) {
          u32 bk[4];
          ldmatrix_x4(bk, kt + (tg * 16 + (lane % 8) + (lane / 16) * 8) * kRowElems + k0 + ((lane / 8) % 2) * 8);
          mma_16816<MT>(s[2 * tg], a, bk[0], bk[1]);
          mma_16816<MT>(s[2 * tg + 1], a, bk[2], bk[3]);
        }
      }
    }
  }

  // The tiles through the CTA ring (DecodeCtaRing::for_each_tile: one barrier per
  // tile, then this body).
  __device__ static void loop(const DecodeParams& p, const Work& w, const MT* q_s, const float* freq_s,
                              unsigned char* ring, MT* conv, int warp, int lane, int n_tiles,
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
    Ring::for_each_tile(p, w, ring, n_tiles, [&](int, int tok0, unsigned char* stage) {
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

      // S = Q K^T over the whole tile and every dim: the same in every warp.
      float s[Tile::kN][4];
      scores(q_s, kt, k_raw, lane, s);

      Base::online_softmax(p, w, s, tok0, g, tq, slope, q_pos, o, m, l);
      Tile::template accumulate_pv<DW>(s, vt, v_raw, lane, o, d_lo);  // O[:, d_lo : d_lo + DW]
    });
  }
};

}  // namespace attnjit
