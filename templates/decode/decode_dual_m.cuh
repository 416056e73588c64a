// The GQA decode main loop for speculative decoding with 17-32 query rows a KV head
// (Traits::kDualM, chosen per launch by DecodeParams::rows_per_cta): one CTA holds
// kDecodeDualMRows rows and each warp holds all of them, as two 16-row MMA M tiles.
// The warps split the tokens and stream their own tiles through private cp.async
// rings, as the token-split loop does, so each K/V byte is read from memory once per
// (request, KV head) instead of once per 16 rows, and each K/V fragment a warp reads
// from shared memory feeds two MMAs. Q stays in shared memory (O for 32 rows takes
// the registers). The warps' partials merge through DecodeMerge over 32 rows.
#pragma once

#include "decode/gqa_decode.cuh"

namespace attnjit {

template <class Tr>
struct DecodeDualM {
  using Base = GqaDecode<Tr>;
  using Work = typename Base::Work;
  using MT = typename Tr::MT;
  using Tile = DecodeTile<Tr>;
  static constexpr int HD = Tr::kHeadDim, G = Tr::kGroup, W = Tr::kWarps;
  static constexpr int kTile = Tr::kTile, kRows = Tr::kRows, kRowElems = Tr::kRowElems;
  static constexpr int kRowsCta = kDecodeDualMRows, kM = kRowsCta / kRows;

  // Shared memory: [Q, 32 rows | RoPE freqs (unused) | the warps' rings]; after the loop
  // the rings' bytes hold the merge buffer: red_o [W][32][HD], red_m, red_l.
  __device__ static void run(const DecodeParams& p, unsigned char* smem) {
    Work w;  // the CTA's: row block of 32 rows, rows_valid <= 32
    if (!Base::template setup<kRowsCta>(p, w)) return;
    MT* q_s = reinterpret_cast<MT*>(smem);
    float* freq_s = reinterpret_cast<float*>(smem + Tr::kQBytesD);
    unsigned char* loop_s = smem + Tr::kQBytesD + Tr::kFreqBytes;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The first KV tiles are in flight while Q loads.
    Base::issue_prologue(p, w, loop_s, warp, lane);
    Base::template load_q<kRowsCta>(p, w, q_s, freq_s);
    __syncthreads();

    // M tile mt's rows as a 16-row block of their own (w.rb * kM + mt), which is how
    // visible() and the per-row constants address them.
    Work wv[kM];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      wv[mt] = w;
      wv[mt].rb = w.rb * kM + mt;
      wv[mt].rows_valid = min(kRows, w.rows_valid - mt * kRows);
    }
    float o[kM][HD / 8][4];
    float m[kM][2], l[kM][2];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      m[mt][0] = m[mt][1] = kNegInf;
      l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.f;
    }
    loop(p, w, wv, q_s, loop_s, warp, lane, o, m, l);

    cp_async_wait<0>();
    __syncthreads();  // the rings are now reused for the warp merge
    pdl_launch_dependents();
    float* red_o = reinterpret_cast<float*>(loop_s);
    float* red_m = red_o + W * kRowsCta * HD;
    float* red_l = red_m + W * kRowsCta;
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
      Base::store_partial(red_o, red_m, red_l, warp * kRowsCta + mt * kRows, m[mt], l[mt], o[mt], lane);
    __syncthreads();
    DecodeMerge<Tr, W, kRowsCta>::merge_and_store(p, w, red_o, red_m, red_l, reinterpret_cast<unsigned*>(smem));
  }

  __device__ static void loop(const DecodeParams& p, const Work& w, const Work (&wv)[kM], const MT* q_s,
                              unsigned char* loop_s, int warp, int lane, float (&o)[kM][HD / 8][4],
                              float (&m)[kM][2], float (&l)[kM][2]) {
    const int g = lane / 4, tq = lane % 4;
    float slope[kM][2];
    int q_pos[kM][2];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int gr = wv[mt].rb * kRows + g + 8 * h;
        q_pos[mt][h] = w.seq_len - w.q_len + gr / G;
        slope[mt][h] = Tr::kPos == pos_mode::kAlibi ? alibi_slope(w.kvh * G + gr % G, p.num_kv_heads * G) * kLog2e : 0.f;
      }
    const u32 no_q_regs[1][4] = {};
    Base::walk_ring(p, w, loop_s, warp, lane, [&](int tok0, unsigned char* stage) {
      const unsigned char* k_raw = stage;
      const unsigned char* v_raw = stage + kTile * Tr::kRawRowBytes;
      float s[kM][Tile::kN][4];
      Tile::template scores_m<kM, false>(no_q_regs, q_s, reinterpret_cast<const MT*>(k_raw), k_raw, lane, s);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
        Base::softmax_tile(p, wv[mt], s[mt], tok0, g, tq, slope[mt], q_pos[mt], o[mt], m[mt], l[mt]);
      Tile::template accumulate_pv_m<kM>(s, reinterpret_cast<const MT*>(v_raw), v_raw, lane, o);
    });
  }
};

}  // namespace attnjit
