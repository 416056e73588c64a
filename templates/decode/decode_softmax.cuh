// The decode kernels' softmax step on one S tile: scale, soft cap, ALiBi, the mask
// (visible: causal, custom spec-decode bits, sliding window), then the online-softmax
// update of the row maxima, sums and O. GqaDecode inherits it; every loop (token split,
// split-M, dual-M, split-D, the transposed tile's mask) calls it through GqaDecode.
// Work: GqaDecode<Tr>::Work, a template parameter so that this header stands apart.
#pragma once

#include "common/dtype.cuh"
#include "common/softmax.cuh"
#include "decode/decode_params.cuh"
#include "decode/decode_token_scales.cuh"

namespace attnjit {

template <class Tr>
struct DecodeSoftmax {
  static constexpr int kTile = Tr::kTile, kRows = Tr::kRows;
  static constexpr unsigned F = Tr::kFeatures;
  __device__ static constexpr bool has(unsigned f) { return (F & f) != 0; }
  __device__ static int row_token(int gr) { return Tr::row_token(gr); }

  template <class Work>
  __device__ static bool visible(const DecodeParams& p, const Work& w, int row, int tok) {
    if (tok >= w.tok_hi) return false;
    if (row >= w.rows_valid) return true;  // padding rows: any finite value, never stored
    const int first_draft = w.seq_len - w.q_len;
    const int qt = row_token(w.rb * kRows + row);
    const int q_pos = first_draft + qt;
    if (Tr::kMask == mask_mode::kCausal && tok > q_pos) return false;
    if (Tr::kMask == mask_mode::kCustom && tok >= first_draft) {
      // Draft tokens: bit (tok - first_draft) of this query's mask row decides.
      int j = tok - first_draft;
      // Rows follow the query tokens: [b][t] when uniform, [q_cu_seq_lens[b] + t] when ragged.
      const unsigned* mrow = p.mask + w.b * p.mask_stride_b + (w.q_tok0 + qt) * p.mask_stride_t;
      if (!((mrow[j >> 5] >> (j & 31)) & 1u)) return false;
    }
    if (has(feat::kWindow) && p.window_left >= 0 && tok < q_pos - p.window_left) return false;
    return true;
  }

  // Whether the CTA's (split-M: the warp's) query rows all sit in rows 0-7 of the MMA's
  // 16 (group <= 8 at q_len 1, the common decode): rows 8-15 are zero padding, so the
  // softmax skips that half (a warp-uniform answer). Their P stays Q's zero score,
  // and O's rows there are never stored. kvpair puts its second group in rows 8-15.
  template <class Work>
  __device__ static bool upper_rows_padding(const Work& w) { return Tr::kKvPack == 1 && w.rows_valid <= 8; }
  // Whether every query row sees every key of the tile at tok0, so the per-key
  // test can be skipped (a warp-uniform answer): past a window's first tile, and on
  // every tile but the last without one, the test only costs instructions, which fp8
  // tiles feel (H200: xqa fp8, 32K window on 128K, 1.12x -> 1.03x the plain 32K's time;
  // single_decode fp8 1.08x -> 0.99x). The latest row (at seq_len - 1) starts
  // its window last, and the drafts (causal or custom mask) at seq_len - q_len.
  template <class Work>
  __device__ static bool seen_whole(const DecodeParams& p, const Work& w, int tok0) {
    if (tok0 + kTile > w.tok_hi) return false;
    if (Tr::kMask != mask_mode::kNone && tok0 + kTile > w.seq_len - w.q_len) return false;
    return !has(feat::kWindow) || p.window_left < 0 || tok0 >= w.seq_len - 1 - p.window_left;
  }

  // Scale, soft cap and ALiBi over one S tile (16 rows x kTile keys), then, with
  // kTestKeys, the mask (visible); mx takes each of the thread's two rows' maxima.
  // ts: the tile's per-token scales (kKTok: s = (q.k + off * sum(q)) * scale; qsum, the
  // thread's two rows' sums of q).
  // kHalves = 1: only the rows 0-7 half (upper_rows_padding()).
  template <bool kTestKeys, int kHalves = 2, class Work>
  __device__ static __forceinline__ void scale_tile(const DecodeParams& p, const Work& w, float (&s)[kTile / 8][4],
                                                    int tok0, int g, int tq, const float (&slope)[2],
                                                    const int (&q_pos)[2], float (&mx)[2],
                                                    const float* ts = nullptr, const float (&qsum)[2] = {0.f, 0.f}) {
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2 * kHalves; ++e) {
        const int h = e / 2, row = g + 8 * h, tok = tok0 + nt * 8 + 2 * tq + (e & 1);
        float x = s[nt][e];
        if constexpr (Tr::kKTok) x = DecodeTokenScales<Tr>::key_score(x, ts, nt * 8 + 2 * tq + (e & 1), qsum[h]);
        x *= w.score_scale;
        if (has(feat::kSoftCap)) x = p.soft_cap * tanhf(x / p.soft_cap);
        x *= kLog2e;
        if (Tr::kPos == pos_mode::kAlibi) x += slope[h] * float(tok - q_pos[h]);
        if (kTestKeys) x = visible(p, w, row, tok) ? x : kNegInf;
        s[nt][e] = x;
        mx[h] = fmaxf(mx[h], x);
      }
  }

  // Every decode loop's tile step between S = Q K^T and O += P V: scale, soft cap,
  // ALiBi, mask, then the online-softmax update of m, l and O (kNo: this warp's O
  // n tiles); s leaves holding P. kHalves = 1: rows 8-15 are padding
  // (upper_rows_padding) and are skipped. ts, qsum, vu: per-token scales
  // (decode_token_scales.cuh; warp_loop's kernels only).
  template <int kHalves, int kNo, class Work>
  __device__ static __forceinline__ void online_softmax(const DecodeParams& p, const Work& w, float (&s)[kTile / 8][4],
                                                        int tok0, int g, int tq, const float (&slope)[2],
                                                        const int (&q_pos)[2], float (&o)[kNo][4], float (&m)[2],
                                                        float (&l)[2], const float* ts = nullptr,
                                                        const float (&qsum)[2] = {0.f, 0.f},
                                                        typename DecodeTokenScales<Tr>::VUnit* vu = nullptr) {
    float mx[2] = {kNegInf, kNegInf};
    if (seen_whole(p, w, tok0)) scale_tile<false, kHalves>(p, w, s, tok0, g, tq, slope, q_pos, mx, ts, qsum);
    else scale_tile<true, kHalves>(p, w, s, tok0, g, tq, slope, q_pos, mx, ts, qsum);
    float ref[2], alpha[2] = {1.f, 1.f};
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const float m_new = fmaxf(m[h], quad_max(mx[h]));
      ref[h] = safe_ref(m_new);
      alpha[h] = m[h] == kNegInf ? 0.f : fast_exp2(m[h] - ref[h]);
      m[h] = m_new;
      l[h] *= alpha[h];
    }
    if constexpr (Tr::kVTok) vu->begin_tile(ts, tq, alpha);
    // Once the row maxima settle, alpha is exactly 1 for the whole warp: the lazy
    // variant skips the O multiplies per tile then (a warp-uniform branch).
    if (!Tr::kLazyRescale || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
#pragma unroll
        for (int j = 0; j < kNo; ++j) {
          o[j][2 * h] *= alpha[h];
          o[j][2 * h + 1] *= alpha[h];
        }
    }
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2 * kHalves; ++e) {
        float pe = fast_exp2(s[nt][e] - ref[e / 2]);
        l[e / 2] += pe;
        if constexpr (Tr::kVTok) pe = vu->scale_p(pe, ts, nt * 8 + 2 * tq + (e & 1), e / 2);
        s[nt][e] = pe;
      }
  }

  // online_softmax on the halves of the rows that hold queries (upper_rows_padding):
  // the loops whose scores need nothing else per half call this.
  template <int kNo, class Work>
  __device__ static __forceinline__ void softmax_tile(const DecodeParams& p, const Work& w, float (&s)[kTile / 8][4],
                                                      int tok0, int g, int tq, const float (&slope)[2],
                                                      const int (&q_pos)[2], float (&o)[kNo][4], float (&m)[2],
                                                      float (&l)[2], const float* ts = nullptr,
                                                      const float (&qsum)[2] = {0.f, 0.f},
                                                      typename DecodeTokenScales<Tr>::VUnit* vu = nullptr) {
    if (upper_rows_padding(w)) online_softmax<1>(p, w, s, tok0, g, tq, slope, q_pos, o, m, l, ts, qsum, vu);
    else online_softmax<2>(p, w, s, tok0, g, tq, slope, q_pos, o, m, l, ts, qsum, vu);
  }
};

}  // namespace attnjit
