// Float64 CPU reference for decode attention (GQA, paging-agnostic): the ground
// truth every GPU test compares against. Masks, RoPE, ALiBi, soft cap, sinks and
// scales are applied here independently of the kernels' code.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/parallel_for.hpp"

namespace attnjit::testing {

struct RefProblem {
  int batch = 1, num_kv_heads = 1, group = 1, head_dim = 128;
  std::vector<int> seq_lens;  // per request
  std::vector<int> q_lens;    // per request (1 for plain decode)
  // Dequantized inputs: q(b, t, head, d), k/v(b, token, kv_head, d).
  std::function<double(int, int, int, int)> q, k, v;
  double sm_scale = 0, q_scale = 1, k_scale = 1, v_scale = 1;
  double soft_cap = 0;
  int window_left = -1;
  enum Pos { kNone, kRope, kAlibi } pos = kNone;
  double rope_scale = 1, rope_theta = 1e4;
  bool causal = false;
  std::function<bool(int, int, int)> custom_mask;  // (b, t, draft index j) -> visible
  std::vector<double> sinks;                        // per q head (natural-log units)
};

struct RefOutput {
  std::vector<double> out;  // [b][t][head][d], t < max q_len
  std::vector<double> lse;  // [b][t][head], base 2 (FlashInfer's convention)
  int max_q = 1;
  size_t index(int b, int t, int h, int d, int heads, int hd) const {
    return ((static_cast<size_t>(b) * max_q + t) * heads + h) * hd + d;
  }
};

inline double alibi_slope_ref(int h, int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return h < p ? std::pow(2.0, -8.0 * (h + 1) / p) : std::pow(2.0, -4.0 * (2 * (h - p) + 1) / p);
}

// RoPE frequencies, theta^(-2i/d) / scale for i < d/2.
inline std::vector<double> rope_freqs(const RefProblem& pr) {
  std::vector<double> f(pr.head_dim / 2);
  for (int i = 0; i < pr.head_dim / 2; ++i) f[i] = std::pow(pr.rope_theta, -2.0 * i / pr.head_dim) / pr.rope_scale;
  return f;
}

inline void rope_ref(double* x, int pos, const std::vector<double>& freq) {
  const int half = static_cast<int>(freq.size());
  for (int i = 0; i < half; ++i) {
    double a = pos * freq[i], c = std::cos(a), s = std::sin(a);
    double x0 = x[i], x1 = x[i + half];
    x[i] = x0 * c - x1 * s;
    x[i + half] = x1 * c + x0 * s;
  }
}

// One (request, kv head): every query row of that head group, on `threads` threads
// (keys and values are read once into flat arrays, then rows are independent).
inline void reference_head(const RefProblem& pr, int b, int kvh, RefOutput& r, unsigned threads) {
  const int heads = pr.num_kv_heads * pr.group, hd = pr.head_dim;
  const int L = pr.seq_lens[b], ql = pr.q_lens[b];
  const std::vector<double> freq = rope_freqs(pr);
  // Keys (scaled, rotated when RoPE is on) and values, once per (request, kv head).
  std::vector<double> keys(static_cast<size_t>(L) * hd), vals(static_cast<size_t>(L) * hd);
  constexpr int kChunk = 1024;
  parallel_for((L + kChunk - 1) / kChunk, threads, [&](int c) {
    for (int j = c * kChunk; j < std::min(L, (c + 1) * kChunk); ++j) {
      double* key = &keys[static_cast<size_t>(j) * hd];
      for (int d = 0; d < hd; ++d) {
        key[d] = pr.k(b, j, kvh, d) * pr.k_scale;
        vals[static_cast<size_t>(j) * hd + d] = pr.v(b, j, kvh, d);
      }
      if (pr.pos == RefProblem::kRope) rope_ref(key, j, freq);
    }
  });
  parallel_for(ql * pr.group, threads, [&](int row) {
    const int t = row / pr.group, g = row % pr.group;
    const int h = kvh * pr.group + g;
    const int q_pos = L - ql + t;
    std::vector<double> qv(hd);
    for (int d = 0; d < hd; ++d) qv[d] = pr.q(b, t, h, d) * pr.q_scale;
    if (pr.pos == RefProblem::kRope) rope_ref(qv.data(), q_pos, freq);
    std::vector<double> logit(L, -INFINITY);
    double mx = -INFINITY;
    for (int j = 0; j < L; ++j) {
      bool vis = true;
      if (pr.causal && j > q_pos) vis = false;
      if (pr.custom_mask && j >= L - ql && !pr.custom_mask(b, t, j - (L - ql))) vis = false;
      if (pr.window_left >= 0 && j < q_pos - pr.window_left) vis = false;
      if (!vis) continue;
      const double* key = &keys[static_cast<size_t>(j) * hd];
      double s = 0;
      for (int d = 0; d < hd; ++d) s += qv[d] * key[d];
      s *= pr.sm_scale;
      if (pr.soft_cap > 0) s = pr.soft_cap * std::tanh(s / pr.soft_cap);
      if (pr.pos == RefProblem::kAlibi) s += alibi_slope_ref(h, heads) * (j - q_pos);
      logit[j] = s;
      mx = std::max(mx, s);
    }
    double sink = pr.sinks.empty() ? -INFINITY : pr.sinks[h];
    double m = std::max(mx, sink);
    if (m == -INFINITY) return;  // nothing visible: output 0, lse -inf
    double den = std::isinf(sink) ? 0.0 : std::exp(sink - m);
    std::vector<double> acc(hd, 0.0);
    for (int j = 0; j < L; ++j) {
      if (logit[j] == -INFINITY) continue;
      double p = std::exp(logit[j] - m);
      den += p;
      const double* val = &vals[static_cast<size_t>(j) * hd];
      for (int d = 0; d < hd; ++d) acc[d] += p * val[d];
    }
    for (int d = 0; d < hd; ++d) r.out[r.index(b, t, h, d, heads, hd)] = acc[d] / den * pr.v_scale;
    r.lse[(static_cast<size_t>(b) * r.max_q + t) * heads + h] = (m + std::log(den)) / std::log(2.0);
  });
}

// `threads` 0: one per hardware thread. Each (request, kv head) writes its own
// slots, so the work splits without locks; the accessors must be thread-safe reads.
// With fewer (request, kv head) pairs than threads (long single-head cases), the
// threads work inside each pair instead.
inline RefOutput reference_decode(const RefProblem& pr, unsigned threads = 0) {
  RefOutput r;
  const int heads = pr.num_kv_heads * pr.group, hd = pr.head_dim;
  for (int ql : pr.q_lens) r.max_q = std::max(r.max_q, ql);
  r.out.assign(static_cast<size_t>(pr.batch) * r.max_q * heads * hd, 0.0);
  r.lse.assign(static_cast<size_t>(pr.batch) * r.max_q * heads, -INFINITY);
  const int tasks = pr.batch * pr.num_kv_heads;
  if (threads == 0) threads = hardware_threads();
  if (static_cast<unsigned>(tasks) >= threads) {
    parallel_for(tasks, threads, [&](int i) { reference_head(pr, i / pr.num_kv_heads, i % pr.num_kv_heads, r, 1); });
  } else {
    for (int i = 0; i < tasks; ++i) reference_head(pr, i / pr.num_kv_heads, i % pr.num_kv_heads, r, threads);
  }
  return r;
}

// ||a - b|| / ||b|| over the entries `use` selects.
inline double rel_l2(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Each element within abs_bound + rel_bound * |ref|: the relative L2 alone lets a
// wrong row or head hide in a large output. Reports the first few outside (as
// "<what>: element i: got g, expected r, bound b") into *report; returns how many.
inline size_t count_outside_bound(const std::vector<double>& got, const std::vector<double>& ref, double abs_bound,
                                  double rel_bound, std::string* report) {
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double bound = abs_bound + rel_bound * std::fabs(ref[i]);
    if (!(std::fabs(got[i] - ref[i]) <= bound)) {  // NaN counts as outside
      if (++bad <= 5 && report)
        *report += "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
                   std::to_string(ref[i]) + ", bound " + std::to_string(bound) + "\n";
    }
  }
  return bad;
}

// The element bound the GPU tests use beside a relative-L2 tolerance `tol`:
// five times the L2 budget, in units of the output's RMS, plus `rel` of each
// element's own size (an fp8 output rounds each element by up to 1/16).
inline double rms(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

}  // namespace attnjit::testing
