// The GQA decode main loop for speculative decoding with more than 16 query rows
// (Traits::kSplitM, chosen per launch by DecodeParams::rows_per_cta): one CTA
// holds kDecodeSplitMRows rows, 16 per warp (one MMA M tile each), and its warps
// share one cp.async KV ring (DecodeCtaRing, one __syncthreads per tile). Each
// warp scores its rows against the whole tile and accumulates O over every dim,
// as a token-split warp does, so each K/V byte is read once per (request, KV head,
// 64 rows) rather than once per 16 rows. Rows are disjoint between warps: no
// cross-warp merge of O; DecodeMerge sees one partial per row, 64 rows per CTA.
#pragma once

#include "decode/decode_cta_ring.cuh"
#include "decode/gqa_decode.cuh"

namespace attnjit {

template <class Tr>
struct DecodeSplitM {
  using Base = GqaDecode<Tr>;
  using Work = typename Base::Work;
  using MT = typename Tr::MT;
  using Tile = DecodeTile<Tr>;
  static constexpr int HD = Tr::kHeadDim, G = Tr::kGroup, W = Tr::kWarps, S = Tr::kSplitMStages;
  static constexpr int kTile = Tr::kTile, kRows = Tr::kRows, kRowElems = Tr::kRowElems;
  static constexpr int kRowsCta = kDecodeSplitMRows;
  using Ring = DecodeCtaRing<Tr, S>;
  static_assert(W * kRows == kRowsCta, "split-M: one 16-row MMA tile per warp");

  // Shared memory: [Q, 64 rows | RoPE freqs (unused) | ring of S stages (K tile, V tile)].
  // After the loop the ring area holds the merge buffer: red_o [64][HD], red_m, red_l.
  __device__ static void run(const DecodeParams& p, unsigned char* smem) {
    Work w;  // the CTA's: row block of 64 rows, rows_valid <= 64
    if (!Base::template setup<kRowsCta>(p, w)) return;
    MT* q_s = reinterpret_cast<MT*>(smem);
    float* freq_s = reinterpret_cast<float*>(smem + Tr::kQBytesM);
    unsigned char* ring = smem + Tr::kQBytesM + Tr::kFreqBytes;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n_tiles = (w.tok_hi - w.tok_lo + kTile - 1) / kTile;
    // The first S - 1 tiles are in flight while Q loads.
    Ring::prologue(p, w, ring, n_tiles);
    Base::template load_q<kRowsCta>(p, w, q_s, freq_s);
    __syncthreads();  // Q is in place before a warp reads its fragments (ahead of the loop's barriers)

    // This warp's rows as a 16-row block of their own: rows w.rb * 64 + warp * 16 + r,
    // i.e. 16-row block w.rb * W + warp, which is how visible() and the per-row
    // constants address them.
    Work wv = w;
    wv.rb = w.rb * W + warp;
    wv.rows_valid = min(kRows, w.rows_valid - warp * kRows);
    float o[HD / 8][4];
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    loop(p, wv, q_s + warp * kRows * kRowElems, ring, lane, n_tiles, o, m, l);

    cp_async_wait<0>();  // only empty groups can be left; no copy may land in the merge buffer
    __syncthreads();     // every warp is done with the ring and Q: both are reused below
    pdl_launch_dependents();
    float* red_o = reinterpret_cast<float*>(ring);
    float* red_m = red_o + kRowsCta * HD;
    float* red_l = red_m + kRowsCta;
    // Warp-uniform; rows past rows_valid are never read.
    if (wv.rows_valid > 0) Base::store_partial(red_o, red_m, red_l, warp * kRows, m, l, o, lane);
    __syncthreads();
    DecodeMerge<Tr, 1, kRowsCta>::merge_and_store(p, w, red_o, red_m, red_l, reinterpret_cast<unsigned*>(smem));
  }

  // Every tile through the CTA ring; this warp scores its 16 rows (q_w) and
  // accumulates O for them. wv: the warp's rows as a 16-row block.
  __device__ static void loop(const DecodeParams& p, const Work& wv, const MT* q_w, unsigned char* ring, int lane,
                              int n_tiles, float (&o)[HD / 8][4], float (&m)[2], float (&l)[2]) {
    u32 qf[Tr::kQInRegs ? HD / 16 : 1][4];
    if constexpr (Tr::kQInRegs) {
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks)
        ldmatrix_x4(qf[ks], q_w + ((lane % 8) + ((lane / 8) % 2) * 8) * kRowElems + ks * 16 + (lane / 16) * 8);
    }
    const int g = lane / 4, tq = lane % 4;
    float slope[2] = {0.f, 0.f};
    int q_pos[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int gr = wv.rb * kRows + g + 8 * h;
      q_pos[h] = wv.seq_len - wv.q_len + gr / G;
      if (Tr::kPos == pos_mode::kAlibi) slope[h] = alibi_slope(wv.kvh * G + gr % G, p.num_kv_heads * G) * kLog2e;
    }
    auto tile = [&](int, int tok0, unsigned char* stage) {
      const unsigned char* k_raw = stage;
      const unsigned char* v_raw = stage + kTile * Tr::kRawRowBytes;
      const MT* kt = reinterpret_cast<const MT*>(k_raw);
      const MT* vt = reinterpret_cast<const MT*>(v_raw);
      float s[Tile::kN][4];
      Tile::scores(qf, q_w, kt, k_raw, lane, s);
      Base::softmax_tile(p, wv, s, tok0, g, tq, slope, q_pos, o, m, l);
      Tile::accumulate_pv(s, vt, v_raw, lane, o);
    };
    // A warp past the CTA's valid rows (q_seq_len x group not a multiple of 64) only
    // copies: the same number of barriers in a loop of its own (rows_valid is
    // warp-uniform), so the loop's barrier is the non-aligned barrier.sync, which
    // counts arrivals at barrier 0 from any instruction. Skipping the math inside
    // one loop instead cost ~70 registers and spilled fp8 at 3 CTAs/SM.
    if (wv.rows_valid > 0) Ring::template for_each_tile<false>(p, wv, ring, n_tiles, tile);
    else Ring::template for_each_tile<false>(p, wv, ring, n_tiles, [](int, int, unsigned char*) {});
  }
};

}  // namespace attnjit
