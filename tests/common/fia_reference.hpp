// float64 reference of fused_infer_attention_score (FIA) for the GPU tests: the
// sparse-mode, mask, band, pse and empty-row rules written from the text,
// and the rarer arguments' rules (left-padding windows, the shared prefix, int8 output).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

namespace attnjit::testing {

// Left padding: the valid window [S - pad - len, S - pad) of a tensor of S tokens; a
// negative pad counts as 0. Returns whether it fits (start >= 0); the batch reads 0 if not.
inline bool fia_left_pad_window(int64_t S, int64_t pad, int64_t len, int* start) {
  const int64_t st = S - std::max<int64_t>(0, pad) - len;
  *start = st >= 0 ? int(st) : 0;
  return st >= 0;
}
// The shared prefix's length: actual_shared_prefix_len clamped to [0, S]; absent: S.
inline int fia_prefix_len(int64_t S, bool given, int64_t actual) {
  return int(given ? std::min(std::max<int64_t>(actual, 0), S) : S);
}
// int8 output: clamp(round(x * scale + offset), -128, 127) (a tie may round either way).
inline double fia_int8_out(double x, double scale, double offset) {
  return std::clamp(std::nearbyint(x * scale + offset), -128.0, 127.0);
}

// Padding and the prefix are the accessors' business: q, k, v, mask and pse take
// logical positions (within the windows; KV j over [prefix | own], kv_lens counting
// both), as Ascend indexes mask and pse.
struct FiaRefProblem {
  int batch = 1, num_heads = 1, num_kv_heads = 1, head_dim = 128, head_dim_v = 128;
  std::vector<int> q_lens, kv_lens;  // actual lengths per batch
  bool decode = false;               // Q_S = 1: sparse_mode, pre and next are ignored
  int sparse_mode = 0;
  int64_t pre_tokens = 2147483647, next_tokens = 2147483647;
  double scale = 1.0;
  // Logical positions: q(b, i, h, d), k(b, j, kv_head, d), v(b, j, kv_head, d).
  std::function<double(int, int, int, int)> q, k, v;
  std::function<double(int, int, int, int)> pse;  // (b, h, i, j); empty: none
  std::function<bool(int, int, int)> masked;       // (b, i, j): true = masked out; empty: no atten_mask
};

struct FiaRefResult {
  std::vector<double> out;  // [b][i < q_lens[b]][h][dv], batches packed by q_lens
  std::vector<double> lse;  // [b][i][h]; +inf for a row that sees no key
  std::vector<size_t> row_begin;  // first row of batch b in out/lse (rows of H heads)
  size_t out_index(int b, int i, int h, int dv, int H, int DV) const {
    return ((row_begin[size_t(b)] + size_t(i)) * H + h) * DV + dv;
  }
  size_t lse_index(int b, int i, int h, int H) const { return (row_begin[size_t(b)] + size_t(i)) * H + h; }
};

// Whether key j is visible from query i of batch b (the rules).
inline bool fia_visible(const FiaRefProblem& p, int b, int i, int j) {
  if (j >= p.kv_lens[size_t(b)]) return false;
  const bool has_mask = static_cast<bool>(p.masked);
  if (p.decode) return !has_mask || !p.masked(b, 0, j);
  const int64_t d = int64_t(p.kv_lens[size_t(b)]) - p.q_lens[size_t(b)];
  const int64_t rel = int64_t(j) - i;
  switch (p.sparse_mode) {
    case 0:
      if (!has_mask) return true;
      return !p.masked(b, i, j) && rel >= -p.pre_tokens && rel <= p.next_tokens;
    case 1: return !p.masked(b, i, j);
    case 2: return rel <= 0;
    case 3: return rel <= d;
    case 4: return rel - d >= -p.pre_tokens && rel - d <= p.next_tokens;
    default: return false;
  }
}

// Rows run in parallel, over dense copies of each batch's Q, K and V: the
// std::function accessors cost far more than the arithmetic.
inline FiaRefResult reference_fia(const FiaRefProblem& p) {
  FiaRefResult r;
  const int H = p.num_heads, KH = p.num_kv_heads, G = H / KH, D = p.head_dim, DV = p.head_dim_v;
  size_t rows = 0;
  for (int b = 0; b < p.batch; ++b) {
    r.row_begin.push_back(rows);
    rows += size_t(p.q_lens[size_t(b)]);
  }
  r.out.assign(rows * H * DV, 0.0);
  r.lse.assign(rows * H, std::numeric_limits<double>::infinity());
  for (int b = 0; b < p.batch; ++b) {
    const int ql = p.q_lens[size_t(b)], kv = p.kv_lens[size_t(b)];
    std::vector<double> Q(size_t(ql) * H * D), K(size_t(kv) * KH * D), V(size_t(kv) * KH * DV);
    for (int i = 0; i < ql; ++i)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) Q[(size_t(i) * H + h) * D + d] = p.q(b, i, h, d);
    for (int j = 0; j < kv; ++j)
      for (int hk = 0; hk < KH; ++hk) {
        for (int d = 0; d < D; ++d) K[(size_t(j) * KH + hk) * D + d] = p.k(b, j, hk, d);
        for (int d = 0; d < DV; ++d) V[(size_t(j) * KH + hk) * DV + d] = p.v(b, j, hk, d);
      }
    auto row = [&](int i, std::vector<double>& s, std::vector<double>& acc) {
      std::vector<char> seen(static_cast<size_t>(kv));
      for (int j = 0; j < kv; ++j) seen[size_t(j)] = fia_visible(p, b, i, j);
      for (int h = 0; h < H; ++h) {
        const int hk = h / G;
        const double* q = &Q[(size_t(i) * H + h) * D];
        s.assign(size_t(kv), -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < kv; ++j) {
          if (!seen[size_t(j)]) continue;
          const double* k = &K[(size_t(j) * KH + hk) * D];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q[d] * k[d];
          const double x = p.scale * dot + (p.pse ? p.pse(b, h, i, j) : 0.0);
          s[size_t(j)] = x;
          mx = std::max(mx, x);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // 0 output, LSE +inf
        double sum = 0;
        acc.assign(size_t(DV), 0.0);
        for (int j = 0; j < kv; ++j) {
          const double e = std::exp(s[size_t(j)] - mx);  // exp(-inf) = 0
          sum += e;
          if (e == 0.0) continue;
          const double* v = &V[(size_t(j) * KH + hk) * DV];
          for (int dv = 0; dv < DV; ++dv) acc[size_t(dv)] += e * v[dv];
        }
        for (int dv = 0; dv < DV; ++dv) r.out[r.out_index(b, i, h, dv, H, DV)] = acc[size_t(dv)] / sum;
        r.lse[r.lse_index(b, i, h, H)] = mx + std::log(sum);
      }
    };
    // Rows are independent: split them over the cores (each writes only its own outputs).
    std::atomic<int> next{0};
    auto worker = [&] {
      std::vector<double> s, acc;
      for (int i; (i = next.fetch_add(1)) < ql;) row(i, s, acc);
    };
    const int n = int(std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), 32u));
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
  }
  return r;
}

}  // namespace attnjit::testing
