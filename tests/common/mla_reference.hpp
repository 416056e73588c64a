// Float64 reference for batch_decode_mla: dense (causal among a request's queries)
// or sparse (each query row's own physical indices), sinks, bmm1/bmm2 scales and LSE.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/parallel_for.hpp"

namespace attnjit::testing {

struct MlaRefProblem {
  int batch = 1, q_len = 1, num_heads = 1, page_size = 64;
  int64_t num_tokens = 0;            // num_pages * page_size
  const std::vector<float>* query = nullptr;  // [batch][q_len][heads][576], as the device sees it
  const std::vector<float>* kv = nullptr;     // [num_pages * page_size][576]
  std::vector<int> block_tables;     // [batch][pages_per_seq]
  int pages_per_seq = 0;
  std::vector<int> seq_lens;         // [batch]
  int top_k = 0;                     // > 0: sparse
  std::vector<int> indices;          // [batch][q_len][top_k]
  double bmm1 = 1.0, bmm2 = 1.0;
  std::vector<float> sinks;          // empty: none
};

struct MlaRefResult {
  std::vector<double> out;  // [batch][q_len][heads][512]
  std::vector<double> lse;  // [batch * q_len][heads], natural log; -inf for a row that sees nothing
};

// The physical token rows that query t of request b attends to.
inline std::vector<int64_t> mla_visible_rows(const MlaRefProblem& p, int b, int t) {
  std::vector<int64_t> rows;
  if (p.top_k > 0) {
    for (int j = 0; j < p.top_k; ++j) {
      const int idx = p.indices[(size_t(b) * p.q_len + t) * p.top_k + j];
      if (idx >= 0 && idx < p.num_tokens) rows.push_back(idx);
    }
  } else {
    const int end = std::min(p.seq_lens[b], p.seq_lens[b] - p.q_len + t + 1);
    for (int j = 0; j < end; ++j)
      rows.push_back(int64_t(p.block_tables[size_t(b) * p.pages_per_seq + j / p.page_size]) * p.page_size +
                     j % p.page_size);
  }
  return rows;
}

inline MlaRefResult reference_mla(const MlaRefProblem& p) {
  constexpr int kD = 576, kDv = 512;
  const int H = p.num_heads;
  MlaRefResult r;
  r.out.assign(size_t(p.batch) * p.q_len * H * kDv, 0.0);
  r.lse.assign(size_t(p.batch) * p.q_len * H, -std::numeric_limits<double>::infinity());
  parallel_for(int64_t(p.batch) * p.q_len, hardware_threads(), [&](int64_t bt) {
    const int b = int(bt / p.q_len), t = int(bt % p.q_len);
    const std::vector<int64_t> rows = mla_visible_rows(p, b, t);
    std::vector<double> s(rows.size()), acc(kDv);
    for (int h = 0; h < H; ++h) {
      const float* q = p.query->data() + ((size_t(b) * p.q_len + t) * H + h) * kD;
      double m = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < rows.size(); ++j) {
        const float* k = p.kv->data() + size_t(rows[j]) * kD;
        double dot = 0;
        for (int d = 0; d < kD; ++d) dot += double(q[d]) * double(k[d]);
        s[j] = dot * p.bmm1;
        m = std::max(m, s[j]);
      }
      const bool sink = !p.sinks.empty();
      if (sink) m = std::max(m, double(p.sinks[h]));
      if (std::isinf(m)) continue;  // sees nothing: output 0, LSE -inf
      double denom = sink ? std::exp(double(p.sinks[h]) - m) : 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < rows.size(); ++j) {
        const double w = std::exp(s[j] - m);
        denom += w;
        const float* v = p.kv->data() + size_t(rows[j]) * kD;
        for (int d = 0; d < kDv; ++d) acc[d] += w * double(v[d]);
      }
      double* o = r.out.data() + ((size_t(b) * p.q_len + t) * H + h) * kDv;
      for (int d = 0; d < kDv; ++d) o[d] = acc[d] / denom * p.bmm2;
      r.lse[(size_t(b) * p.q_len + t) * H + h] = m + std::log(denom);
    }
  });
  return r;
}

}  // namespace attnjit::testing
