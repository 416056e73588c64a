// The float64 reference the GPU tests trust: threaded runs equal the serial one,
// and hand-checkable cases come out right.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/attention_reference.hpp"

namespace attnjit::testing {
namespace {

RefProblem random_problem(std::vector<double>& q, std::vector<double>& k, std::vector<double>& v) {
  RefProblem pr;
  pr.batch = 3;
  pr.num_kv_heads = 2;
  pr.group = 4;
  pr.head_dim = 32;
  pr.seq_lens = {1, 37, 200};
  pr.q_lens = {1, 3, 2};
  std::mt19937 rng(5);
  std::normal_distribution<double> n(0, 1);
  q.resize(3 * 3 * 8 * 32);
  k.resize(3 * 200 * 2 * 32);
  v.resize(k.size());
  for (auto& x : q) x = n(rng);
  for (auto& x : k) x = n(rng);
  for (auto& x : v) x = n(rng);
  pr.q = [&q](int b, int t, int h, int d) { return q[((b * 3 + t) * 8 + h) * 32 + d]; };
  pr.k = [&k](int b, int j, int h, int d) { return k[((b * 200 + j) * 2 + h) * 32 + d]; };
  pr.v = [&v](int b, int j, int h, int d) { return v[((b * 200 + j) * 2 + h) * 32 + d]; };
  pr.sm_scale = 1 / std::sqrt(32.0);
  pr.soft_cap = 10;
  pr.pos = RefProblem::kAlibi;
  pr.window_left = 50;
  pr.custom_mask = [](int, int t, int j) { return j <= t; };
  pr.sinks.assign(8, 0.5);
  return pr;
}

TEST(AttentionReference, ThreadedEqualsSerial) {
  std::vector<double> q, k, v;
  RefProblem pr = random_problem(q, k, v);
  RefOutput a = reference_decode(pr, 1), b = reference_decode(pr, 4);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
}

// One (request, kv head) pair: the threads split its rows and keys instead.
TEST(AttentionReference, ThreadsInsideOneHeadEqualSerial) {
  std::vector<double> q, k, v;
  RefProblem pr = random_problem(q, k, v);
  pr.batch = 1;
  pr.num_kv_heads = 1;
  pr.group = 8;
  pr.seq_lens = {3000};
  pr.q_lens = {1};
  k.resize(3000 * 32);
  v.resize(3000 * 32);
  std::mt19937 rng(9);
  std::normal_distribution<double> n(0, 1);
  for (auto& x : k) x = n(rng);
  for (auto& x : v) x = n(rng);
  pr.k = [&k](int, int j, int, int d) { return k[j * 32 + d]; };
  pr.v = [&v](int, int j, int, int d) { return v[j * 32 + d]; };
  pr.q = [&q](int, int, int h, int d) { return q[h * 32 + d]; };
  pr.custom_mask = nullptr;
  pr.sinks.clear();
  pr.pos = RefProblem::kRope;
  RefOutput a = reference_decode(pr, 1), b = reference_decode(pr, 5);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
}

// head_dim 2, frequency 1: q at position 1 and key j rotate by 1 and j radians, so
// the logit of key j is cos(1 - j) for q = k = (1, 0).
TEST(AttentionReference, RopeRotatesByPosition) {
  RefProblem pr;
  pr.head_dim = 2;
  pr.seq_lens = {2};
  pr.q_lens = {1};
  pr.q = [](int, int, int, int d) { return d == 0 ? 1.0 : 0.0; };
  pr.k = [](int, int, int, int d) { return d == 0 ? 1.0 : 0.0; };
  pr.v = [](int, int j, int, int) { return j == 0 ? 1.0 : 0.0; };
  pr.sm_scale = 1.0;
  pr.pos = RefProblem::kRope;
  RefOutput r = reference_decode(pr);
  const double s0 = std::cos(1.0), s1 = 1.0;
  EXPECT_NEAR(r.out[0], std::exp(s0) / (std::exp(s0) + std::exp(s1)), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(std::exp(s0) + std::exp(s1)) / std::log(2.0), 1e-12);
}

TEST(AttentionReference, SingleKeyReturnsItsValue) {
  RefProblem pr;
  pr.head_dim = 2;
  pr.seq_lens = {1};
  pr.q_lens = {1};
  pr.q = [](int, int, int, int) { return 1.0; };
  pr.k = [](int, int, int, int) { return 1.0; };
  pr.v = [](int, int, int, int d) { return d == 0 ? 3.0 : -2.0; };
  pr.sm_scale = 1.0;
  RefOutput r = reference_decode(pr);
  EXPECT_DOUBLE_EQ(r.out[0], 3.0);
  EXPECT_DOUBLE_EQ(r.out[1], -2.0);
  EXPECT_NEAR(r.lse[0], 2.0 / std::log(2.0), 1e-12);  // logit q.k = 2, base 2
}

TEST(AttentionReference, SinkOnlyDilutes) {
  RefProblem pr;
  pr.head_dim = 1;
  pr.seq_lens = {1};
  pr.q_lens = {1};
  pr.q = [](int, int, int, int) { return 0.0; };
  pr.k = [](int, int, int, int) { return 0.0; };
  pr.v = [](int, int, int, int) { return 4.0; };
  pr.sm_scale = 1.0;
  pr.sinks = {0.0};  // exp(0) = exp(logit 0): half the weight goes to the sink
  RefOutput r = reference_decode(pr);
  EXPECT_DOUBLE_EQ(r.out[0], 2.0);
}

// One wrong element in a large output barely moves the relative L2 (the GPU
// tests' only check before), but the element bound catches it.
TEST(AttentionReference, ElementBoundCatchesWhatTheL2Hides) {
  std::vector<double> ref(100000), got;
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::sin(double(i));
  got = ref;
  got[4242] += 0.5;  // one element off by half the output's range
  const double tol = 1e-2;
  EXPECT_LE(rel_l2(got, ref), tol) << "the L2 alone passes it";
  std::string report;
  EXPECT_EQ(count_outside_bound(got, ref, 5 * tol * rms(ref), tol, &report), 1u);
  EXPECT_NE(report.find("element 4242"), std::string::npos) << report;
  got[7] = std::nan("");
  EXPECT_EQ(count_outside_bound(got, ref, 5 * tol * rms(ref), tol, nullptr), 2u) << "NaN is outside every bound";
  EXPECT_EQ(count_outside_bound(ref, ref, 0, 0, nullptr), 0u);
}

}  // namespace
}  // namespace attnjit::testing
