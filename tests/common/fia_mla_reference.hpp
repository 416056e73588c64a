// float64 reference of MLA inside FIA (query_rope/key_rope) from the split tensors:
// reference_fia with Q = [query | query_rope] and K = [key | key_rope] (576 dims) for
// the score, V = key (the 512-dim latent), one KV head, and the seed's sparse rules
// (Q_S = 1: mode 0 without a mask; Q_S > 1: mode 3, j <= i + kv_len - q_len).
#pragma once

#include <functional>
#include <vector>

#include "common/fia_reference.hpp"

namespace attnjit::testing {

struct FiaMlaRefProblem {
  int batch = 1, num_heads = 32, q_seq = 1;
  std::vector<int> q_lens, kv_lens;  // actual lengths per batch (q_lens <= q_seq)
  double scale = 1.0;
  // Logical positions: query (b, t, h, d < 512), query_rope (b, t, h, d < 64),
  // key (b, j, d < 512), key_rope (b, j, d < 64); j is the KV position (paging undone).
  std::function<double(int, int, int, int)> q_nope, q_rope;
  std::function<double(int, int, int)> k_nope, k_rope;
};

// out and lse as reference_fia's (rows t < q_lens[b] only; others are 0 and +inf).
inline FiaRefResult reference_fia_mla(const FiaMlaRefProblem& m) {
  constexpr int kNope = 512, kRope = 64;
  FiaRefProblem p;
  p.batch = m.batch;
  p.num_heads = m.num_heads;
  p.num_kv_heads = 1;
  p.head_dim = kNope + kRope;
  p.head_dim_v = kNope;
  p.q_lens = m.q_lens;
  p.kv_lens = m.kv_lens;
  p.decode = false;  // query_rope: Q_S = 1 reads actual_seq_lengths too (issue 11)
  p.sparse_mode = m.q_seq == 1 ? 0 : 3;
  p.scale = m.scale;
  p.q = [&m](int b, int t, int h, int d) { return d < kNope ? m.q_nope(b, t, h, d) : m.q_rope(b, t, h, d - kNope); };
  p.k = [&m](int b, int j, int, int d) { return d < kNope ? m.k_nope(b, j, d) : m.k_rope(b, j, d - kNope); };
  p.v = [&m](int b, int j, int, int d) { return m.k_nope(b, j, d); };
  return reference_fia(p);
}

}  // namespace attnjit::testing
