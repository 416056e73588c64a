// Tests of tests/common/mla_reference.hpp, the float64 reference the MlaGpu tests trust:
// its visibility rules (causal among a request's queries; sparse indices with -1 and
// out-of-cache entries unused) and its arithmetic on cases small enough to work by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/mla_reference.hpp"

namespace attnjit::testing {
namespace {

// Two pages of 16 tokens, page 1 first in the request's block table.
MlaRefProblem small_problem(std::vector<float>& q, std::vector<float>& kv, int q_len, int heads) {
  MlaRefProblem p;
  p.batch = 1;
  p.q_len = q_len;
  p.num_heads = heads;
  p.page_size = 16;
  p.num_tokens = 32;
  p.pages_per_seq = 2;
  p.block_tables = {1, 0};
  p.seq_lens = {20};
  q.assign(size_t(q_len) * heads * 576, 0.f);
  kv.assign(32 * 576, 0.f);
  p.query = &q;
  p.kv = &kv;
  return p;
}

TEST(MlaReference, CausalAmongTheRequestsQueries) {
  std::vector<float> q, kv;
  MlaRefProblem p = small_problem(q, kv, 3, 1);
  // Query t sees positions < 20 - 3 + t + 1; position j lives in page block_tables[j / 16].
  for (int t = 0; t < 3; ++t) {
    const auto rows = mla_visible_rows(p, 0, t);
    ASSERT_EQ(rows.size(), size_t(18 + t)) << t;
    EXPECT_EQ(rows[0], 16);        // position 0: page 1, slot 0
    EXPECT_EQ(rows[16], 0);        // position 16: page 0, slot 0
    EXPECT_EQ(rows.back(), 18 + t - 16 - 1);
  }
  p.seq_lens = {1};  // shorter than its queries: the first two rows see nothing
  EXPECT_TRUE(mla_visible_rows(p, 0, 0).empty());
  EXPECT_TRUE(mla_visible_rows(p, 0, 1).empty());
  EXPECT_EQ(mla_visible_rows(p, 0, 2).size(), 1u);
}

TEST(MlaReference, SparseSkipsUnusedAndOutOfCacheIndices) {
  std::vector<float> q, kv;
  MlaRefProblem p = small_problem(q, kv, 2, 1);
  p.top_k = 4;
  p.indices = {5, -1, 31, 32, /* t = 1 */ -1, -1, 0, 7};
  EXPECT_EQ(mla_visible_rows(p, 0, 0), (std::vector<int64_t>{5, 31}));
  EXPECT_EQ(mla_visible_rows(p, 0, 1), (std::vector<int64_t>{0, 7}));
}

TEST(MlaReference, ArithmeticByHand) {
  std::vector<float> q, kv;
  MlaRefProblem p = small_problem(q, kv, 1, 2);
  p.top_k = 2;
  p.indices = {3, 9};
  p.bmm1 = 0.5;
  p.bmm2 = 2.0;
  // Head 0: q . k3 = 2 (dim 0), q . k9 = 4 (dim 540, a rope dim): logits 1 and 2.
  q[0] = 1.f;
  q[540] = 2.f;
  kv[3 * 576 + 0] = 2.f;
  kv[9 * 576 + 540] = 2.f;
  kv[3 * 576 + 7] = 1.f;   // V of token 3: dim 7
  kv[9 * 576 + 8] = 3.f;   // V of token 9: dim 8
  // Head 1: all-zero query, so equal weights.
  const MlaRefResult r = reference_mla(p);
  const double w3 = std::exp(1.0), w9 = std::exp(2.0), z = w3 + w9;
  EXPECT_NEAR(r.out[7], 2.0 * w3 / z * 1.0, 1e-12);
  EXPECT_NEAR(r.out[8], 2.0 * w9 / z * 3.0, 1e-12);
  EXPECT_NEAR(r.out[0], 2.0 * w3 / z * 2.0, 1e-12);  // V is the first 512 dims of the same row
  EXPECT_NEAR(r.lse[0], std::log(z), 1e-12);
  EXPECT_NEAR(r.out[512 + 7], 2.0 * 0.5, 1e-12);
  EXPECT_NEAR(r.out[512 + 8], 2.0 * 0.5 * 3.0, 1e-12);
  EXPECT_NEAR(r.lse[1], std::log(2.0), 1e-12);
  // A sink joins the denominator (not the numerator) and the LSE.
  p.sinks = {3.f, 0.f};
  const MlaRefResult s = reference_mla(p);
  EXPECT_NEAR(s.out[7], 2.0 * w3 / (z + std::exp(3.0)), 1e-12);
  EXPECT_NEAR(s.lse[0], std::log(z + std::exp(3.0)), 1e-12);
  // A row that sees nothing: output 0, LSE -inf (or the sink's logit with a sink).
  p.indices = {-1, -1};
  p.sinks.clear();
  const MlaRefResult e = reference_mla(p);
  EXPECT_EQ(e.out[7], 0.0);
  EXPECT_TRUE(std::isinf(e.lse[0]) && e.lse[0] < 0);
  p.sinks = {3.f, 0.f};
  EXPECT_NEAR(reference_mla(p).lse[0], 3.0, 1e-12);
}

}  // namespace
}  // namespace attnjit::testing
