// Randomly broken arguments for the decode-family ops (plan_xqa, plan_single_decode):
// every call either plans a launch whose shapes hold together, or throws
// attnjit::Error(kInvalidArgument or kUnsupported) whose message names an argument.
// Never another exception and never a crash: CI also runs this under ASan and UBSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "attnjit/error.hpp"
#include "common/fia_antiquant_args.hpp"
#include "common/op_args.hpp"
#include "ops/common/validate.hpp"
#include "ops/fia/fia_decode.hpp"
#include "ops/fia/fia_mla.hpp"
#include "ops/fia/prefill_family.hpp"
#include "ops/mla/mla_family.hpp"
#include "ops/mla/mla_plan.hpp"

namespace attnjit::ops {
namespace {

using testing::fake;

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  int below(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  bool coin() { return below(2) == 0; }

  int64_t dim() {
    static const int64_t kDims[] = {-1, 0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 64, 100, 128, 256, 512,
                                    65536, int64_t(1) << 31, int64_t(1) << 40, INT64_MAX, INT64_MIN};
    return coin() ? kDims[below(sizeof(kDims) / sizeof(kDims[0]))] : 1 + below(300);
  }
  int small_int() {
    static const int kInts[] = {INT_MIN, -100, -2, -1, 0, 1, 2, 3, 4, 5, 8, 16, 24, 31, 32, 33, 64, 100, 128,
                                256, 1000, 65536, INT_MAX};
    return kInts[below(sizeof(kInts) / sizeof(kInts[0]))];
  }
  float scalar() {
    static const float kFloats[] = {-1.f, 0.f, 1e-30f, 0.5f, 1.f, 30.f, 1e30f,
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::quiet_NaN()};
    return kFloats[below(sizeof(kFloats) / sizeof(kFloats[0]))];
  }
  // Any enum value, including ones past the last enumerator (a cast by the caller).
  template <class E>
  E any_enum(int past_last) { return static_cast<E>(below(past_last + 3)); }

  void tensor(TensorView& t) {
    switch (below(9)) {
      case 0: {
        static const int kRanks[] = {INT_MIN, -1, 0, 1, 2, 3, 4, 5, 6, 7, 100};
        t.rank = kRanks[below(sizeof(kRanks) / sizeof(kRanks[0]))];
        break;
      }
      case 1: t.shape[below(kMaxRank)] = dim(); break;
      case 2: t.stride[below(kMaxRank)] = coin() ? dim() : -(dim() & INT64_MAX); break;
      case 3: t.dtype = any_enum<DType>(int(DType::kInt64) + 1); break;
      case 4: t.data = nullptr; break;
      case 5: t.data = static_cast<char*>(t.data) + (1 << below(4)); break;
      case 6: t = TensorView{}; break;
      case 7: t.data = fake(0x900000); break;  // present where it may have been absent
      default: {  // a well-formed view of another shape
        const int rank = 1 + below(kMaxRank);
        TensorView u;
        u.data = t.data ? t.data : fake(0x900000);
        u.dtype = coin() ? t.dtype : any_enum<DType>(int(DType::kInt64));
        u.rank = rank;
        int64_t st = 1;
        for (int d = rank - 1; d >= 0; --d) {
          u.shape[d] = 1 + below(d == rank - 1 ? 300 : 40);
          u.stride[d] = st;
          st *= u.shape[d];
        }
        t = u;
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

// The outcome of one call: planned, refused with a named argument, or a defect.
template <class F>
bool planned(F&& f, std::string* defect) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    const bool code_ok = e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kUnsupported;
    const std::string what = e.what();
    const bool named = what.find("argument '") != std::string::npos || what.find("backend") != std::string::npos;
    if (!code_ok || !named) *defect = std::string("unclear error (") + to_string(e.code()) + "): " + what;
  } catch (const std::exception& e) {
    *defect = std::string("not an attnjit::Error: ") + e.what();
  }
  return false;
}

bool well_formed(const TensorView& t) {
  if (t.rank < 1 || t.rank > kMaxRank || !t.data || dtype_size(t.dtype) == 0) return false;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] < 1) return false;
  return true;
}

constexpr int kCases = 20000;

// Every (b, h, pos, d) corner the kernel may dequantise (prefill_params.cuh's formula
// from q's pointer `at`) lies inside t, the scale or offset tensor it belongs to.
void expect_dq_inside(const PrefillDequant& q, const void* at, const TensorView& t, const FiaPlan& plan,
                      const FiaArgs& a) {
  int64_t lo = 0, hi = 0;  // t's byte extent from t.data
  const int64_t es = int64_t(dtype_size(t.dtype));
  for (int i = 0; i < t.rank; ++i) (t.stride[i] < 0 ? lo : hi) += t.stride[i] * (t.shape[i] - 1) * es;
  int64_t pos_max = plan.kv_seq - 1, b_max = plan.batch - 1;
  if (q.paged) {
    pos_max = a.block_size - 1, b_max = a.key.shape[0] - 1;
  } else if (plan.params.block_size) {
    pos_max = 0;
    for (int b = 0; b < plan.batch; ++b) pos_max = std::max<int64_t>(pos_max, fia_lengths(plan, a, b).kv_len - 1);
  }
  const int64_t base = static_cast<const char*>(at) - static_cast<const char*>(t.data);
  for (int64_t b : {int64_t(0), b_max})
    for (int64_t h : {int64_t(0), int64_t(plan.num_kv_heads - 1)})
      for (int64_t pos : {int64_t(0), pos_max})
        for (int64_t d : {int64_t(0), int64_t(plan.spec.head_dim_qk - 1)}) {
          const int64_t off = base + (q.sb * b + q.sh * h + q.ss * pos + q.sd * d) * es;
          ASSERT_TRUE(off >= lo && off <= hi) << "dequant element (" << b << ", " << h << ", " << pos << ", " << d
                                              << ") at byte " << off << " outside " << t.shape_string();
        }
}

TEST(OpFuzz, XqaPlansOrNamesTheArgument) {
  Mutator mu(20261129);
  int accepted = 0;
  for (int i = 0; i < kCases; ++i) {
    const int q_seq_len = mu.below(4) == 0 ? 3 : 1;
    XqaArgs a = testing::valid_xqa(mu.coin() ? KvLayout::kNHD : KvLayout::kHND, q_seq_len);
    if (mu.below(4) == 0) a.workspace_buffer = TensorView::contiguous(fake(0x800000), DType::kUInt8, {1 << 20});
    if (mu.below(4) == 0) a.semaphores = TensorView::contiguous(fake(0x810000), DType::kUInt32, {64});
    if (mu.below(4) == 0)
      a.sinks = TensorView::contiguous(fake(0x820000), DType::kFloat32, {testing::kKvHeads, testing::kGroup});
    const int edits = 1 + mu.below(3);
    for (int e = 0; e < edits; ++e) {
      switch (mu.below(20)) {
        case 0: mu.tensor(a.q); break;
        case 1: mu.tensor(a.k_cache); break;
        case 2: mu.tensor(a.v_cache); break;
        case 3: mu.tensor(a.page_table); break;
        case 4: mu.tensor(a.seq_lens); break;
        case 5: mu.tensor(a.output); break;
        case 6: mu.tensor(a.workspace_buffer); break;
        case 7: mu.tensor(a.semaphores); break;
        case 8: mu.tensor(a.sinks); break;
        case 9: mu.tensor(a.mask); break;
        case 10: mu.tensor(a.q_cu_seq_lens); break;
        case 11: a.num_kv_heads = mu.small_int(); break;
        case 12: a.page_size = mu.small_int(); break;
        case 13: a.q_seq_len = mu.small_int(); break;
        case 14: a.sliding_win_size = mu.small_int(); break;
        case 15: a.rcp_out_scale = mu.scalar(); break;
        case 16: a.q_scale = mu.coin() ? ScaleArg(mu.scalar()) : ScaleArg(static_cast<const float*>(fake(0x830000))); break;
        case 17: a.kv_scale = mu.coin() ? ScaleArg(mu.scalar()) : ScaleArg(static_cast<const float*>(fake(0x830000))); break;
        case 18: a.sm_count = mu.small_int(); break;
        default:
          if (mu.coin()) a.kv_layout = mu.any_enum<KvLayout>(2);
          else a.backend = mu.any_enum<Backend>(3);
      }
    }
    std::string defect;
    XqaPlan plan;
    if (planned([&] { plan = plan_xqa(a, testing::kPlanArch); }, &defect)) {
      ++accepted;
      // What a launch would rely on.
      SCOPED_TRACE("case " + std::to_string(i));
      for (const TensorView* t : {&a.q, &a.k_cache, &a.v_cache, &a.page_table, &a.seq_lens, &a.output})
        ASSERT_TRUE(well_formed(*t)) << "accepted a malformed tensor " << t->shape_string();
      ASSERT_TRUE(a.kv_layout == KvLayout::kNHD || a.kv_layout == KvLayout::kHND);
      const DecodeShape& s = plan.shape;
      ASSERT_GE(s.batch, 1);
      ASSERT_GE(s.num_kv_heads, 1);
      ASSERT_TRUE(s.group >= 1 && s.group <= 64) << s.group;
      ASSERT_TRUE(s.head_dim >= 16 && s.head_dim % 16 == 0) << s.head_dim;
      ASSERT_GE(s.q_seq_len, 1);
      ASSERT_GE(s.max_seq_len, a.page_size);
      ASSERT_GE(plan.params.pages_per_seq, 1);
      // The spec the op built reads back from its name (what logs and the CLI show).
      ASSERT_EQ(spec::KernelSpec::from_name(plan.spec.name()), plan.spec) << plan.spec.name();
    } else {
      ASSERT_TRUE(defect.empty()) << "case " << i << ": " << defect;
    }
  }
  // The fuzzer must reach both outcomes, or it tests only one side.
  EXPECT_GT(accepted, kCases / 50);
  EXPECT_LT(accepted, kCases / 2);
}

TEST(OpFuzz, SingleDecodePlansOrNamesTheArgument) {
  Mutator mu(11292026);
  int accepted = 0;
  for (int i = 0; i < kCases; ++i) {
    testing::SingleDecodeCall c = testing::valid_single(mu.coin() ? KvLayout::kNHD : KvLayout::kHND);
    c.with_lse = mu.coin();
    const int edits = 1 + mu.below(3);
    for (int e = 0; e < edits; ++e) {
      switch (mu.below(16)) {
        case 0: mu.tensor(c.q); break;
        case 1: mu.tensor(c.k); break;
        case 2: mu.tensor(c.v); break;
        case 3: mu.tensor(c.out); break;
        case 4: mu.tensor(c.lse); break;
        case 5: c.o.q_scale = mu.scalar(); break;
        case 6: c.o.k_scale = mu.scalar(); break;
        case 7: c.o.v_scale = mu.scalar(); break;
        case 8: c.o.window_left = mu.small_int(); break;
        case 9: c.o.logits_soft_cap = mu.scalar(); break;
        case 10: c.o.sm_scale = mu.scalar(); break;
        case 11: c.o.rope_scale = mu.scalar(); break;
        case 12: c.o.rope_theta = mu.scalar(); break;
        case 13: c.o.pos_encoding_mode = mu.any_enum<PosEncodingMode>(3); break;
        case 14: c.o.kv_layout = mu.any_enum<KvLayout>(2); break;
        default: c.o.backend = mu.any_enum<Backend>(3);
      }
    }
    std::string defect;
    SingleDecodePlan plan;
    if (planned([&] { plan = c.plan(); }, &defect)) {
      ++accepted;
      SCOPED_TRACE("case " + std::to_string(i));
      for (const TensorView* t : {&c.q, &c.k, &c.v, &c.out})
        ASSERT_TRUE(well_formed(*t)) << "accepted a malformed tensor " << t->shape_string();
      if (c.with_lse) ASSERT_TRUE(well_formed(c.lse)) << c.lse.shape_string();
      ASSERT_TRUE(c.o.kv_layout == KvLayout::kNHD || c.o.kv_layout == KvLayout::kHND);
      ASSERT_TRUE(c.o.pos_encoding_mode == PosEncodingMode::kNone ||
                  c.o.pos_encoding_mode == PosEncodingMode::kRopeLlama ||
                  c.o.pos_encoding_mode == PosEncodingMode::kAlibi);
      const DecodeParams& p = plan.params;
      for (float x : {p.sm_scale, p.q_scale, p.k_scale, p.v_scale, p.rope_rcp_scale, p.rope_rcp_theta})
        ASSERT_TRUE(std::isfinite(x) && x > 0.f) << "accepted a scale that poisons the output: " << x;
      ASSERT_TRUE(std::isfinite(p.soft_cap) && p.soft_cap >= 0.f) << p.soft_cap;
      ASSERT_GE(plan.shape.num_kv_heads, 1);
      ASSERT_GE(plan.shape.group, 1);
      ASSERT_GE(plan.shape.max_seq_len, 1);
      ASSERT_EQ(spec::KernelSpec::from_name(plan.spec.name()), plan.spec) << plan.spec.name();
    } else {
      ASSERT_TRUE(defect.empty()) << "case " << i << ": " << defect;
    }
  }
  EXPECT_GT(accepted, kCases / 50);
  EXPECT_LT(accepted, kCases / 2);
}

TEST(OpFuzz, FiaPlansOrNamesTheArgument) {
  Mutator mu(20261201);
  int accepted = 0, quantised = 0;
  static const char* kLayouts[] = {"BSH", "BSND", "BNSD", "BNSD_BSND", "TND", "NZ", "", "bsnd"};
  for (int i = 0; i < kCases; ++i) {
    FiaArgs a = testing::valid_fia(mu.coin() ? 64 : 1);
    const bool qs1 = a.query.shape[1] == 1;
    const DType i8 = DType::kInt8, i4 = DType::kInt32;
    const int64_t KN = testing::kFiaKvHeads, D = testing::kHd, KS = testing::kFiaKvSeq, B = testing::kFiaBatch;
    // Left padding, a shared prefix, int8 output, quantised K/V or the full int8 path to
    // start from, valid as given.
    switch (mu.below(8)) {
      case 7:  // int8 query, key and value with the three per-tensor scales (Q_S > 1)
        a = testing::int8_qkv(qs1 ? 16 : 64);
        break;
      case 4:  // per channel (Q_S 1) or per token (B, S) (Q_S 16), int8
        a = qs1 ? testing::separate_kv(1, i8, 0, {1, KN, 1, D}, 0, {1, KN, 1, D})
                : testing::separate_kv(16, i8, 1, {B, KS}, 1, {B, KS});
        break;
      case 5:  // int4 per token and head, or the combined param at Q_S > 1
        a = qs1 ? testing::separate_kv(1, i4, 3, {B, KN, KS}, 3, {B, KN, KS})
                : testing::combined_kv(64, "BSND", {2, KN, D});
        break;
      case 6:  // page-managed per token and head, or the combined param per token at Q_S 1
        if (mu.coin()) {
          a = testing::separate_kv(1, i8, 5, {8, KN, 128}, 5, {8, KN, 128});
          testing::page_kv(a, 128);
        } else {
          a = testing::combined_kv(1, "BSND", {2, B, KS}, DType::kFloat32);
          a.antiquant_mode = 1;
        }
        break;
      case 0:
        a.actual_seq_lengths = {30};
        a.actual_seq_lengths_kv = {100, 7};
        a.query_padding_size = TensorView::contiguous(testing::fake(0x800000), DType::kInt64, {1});
        a.kv_padding_size = TensorView::contiguous(testing::fake(0x800100), DType::kInt64, {2});
        break;
      case 1:
        a.key_shared_prefix = TensorView::contiguous(testing::fake(0x900000), DType::kBFloat16, {1, 40, 2, 128});
        a.value_shared_prefix = TensorView::contiguous(testing::fake(0xa00000), DType::kBFloat16, {1, 40, 2, 128});
        a.actual_shared_prefix_len = TensorView::contiguous(testing::fake(0x800200), DType::kInt64, {1});
        break;
      case 2:
        a.attention_out.dtype = DType::kInt8;
        a.quant_scale2 = TensorView::contiguous(testing::fake(0x800300), DType::kFloat32, {8, 128});
        a.quant_offset2 = TensorView::contiguous(testing::fake(0x800400), DType::kFloat32, {8, 128});
        break;
      default: break;
    }
    const int edits = 1 + mu.below(3);
    for (int e = 0; e < edits; ++e) {
      switch (mu.below(40)) {
        case 37: mu.tensor(a.dequant_scale1); break;
        case 38: mu.tensor(a.quant_scale1); break;
        case 39: mu.tensor(a.dequant_scale2); break;
        case 26: mu.tensor(a.antiquant_scale); break;
        case 27: mu.tensor(a.antiquant_offset); break;
        case 28: mu.tensor(a.key_antiquant_scale); break;
        case 29: mu.tensor(a.key_antiquant_offset); break;
        case 30: mu.tensor(a.value_antiquant_scale); break;
        case 31: mu.tensor(a.value_antiquant_offset); break;
        case 32: a.antiquant_mode = mu.coin() ? mu.below(2) : mu.small_int(); break;
        case 33: a.key_antiquant_mode = mu.coin() ? mu.below(6) : mu.small_int(); break;
        case 34: a.value_antiquant_mode = mu.coin() ? mu.below(6) : mu.small_int(); break;
        case 35: {  // one dim of every antiquant tensor at once (key and value shapes must agree)
          const int dim = mu.below(kMaxRank);
          const int64_t size = mu.coin() ? mu.dim() : 1 + mu.below(300);
          for (TensorView* t : {&a.antiquant_scale, &a.antiquant_offset, &a.key_antiquant_scale, &a.key_antiquant_offset,
                                &a.value_antiquant_scale, &a.value_antiquant_offset})
            if (t->rank > dim) t->shape[dim] = size;
          break;
        }
        case 19: mu.tensor(a.query_padding_size); break;
        case 20: mu.tensor(a.kv_padding_size); break;
        case 21: mu.tensor(a.key_shared_prefix); break;
        case 22: mu.tensor(a.value_shared_prefix); break;
        case 23: mu.tensor(a.actual_shared_prefix_len); break;
        case 24: mu.tensor(a.quant_scale2); break;
        case 25: mu.tensor(a.quant_offset2); break;
        case 0: mu.tensor(a.query); break;
        case 1: mu.tensor(a.key); break;
        case 2: mu.tensor(a.value); break;
        case 3: mu.tensor(a.attention_out); break;
        case 4: mu.tensor(a.softmax_lse); break;
        case 5: mu.tensor(a.atten_mask); break;
        case 6: mu.tensor(a.pse_shift); break;
        case 7: mu.tensor(a.block_table); break;
        case 8: a.num_heads = mu.small_int(); break;
        case 9: a.num_key_value_heads = mu.small_int(); break;
        case 10: a.sparse_mode = mu.small_int(); break;
        case 11: a.pre_tokens = mu.small_int(); break;
        case 12: a.next_tokens = mu.small_int(); break;
        case 13: a.block_size = mu.small_int(); break;
        case 14: a.input_layout = kLayouts[mu.below(8)]; break;
        case 15: a.actual_seq_lengths.assign(size_t(mu.below(4)), int64_t(mu.small_int())); break;
        case 16: a.actual_seq_lengths_kv.assign(size_t(mu.below(4)), int64_t(mu.small_int())); break;
        case 17: a.softmax_lse_flag = mu.coin(); break;
        case 18: a.scale = mu.scalar(); break;
        default: a.inner_precise = mu.small_int();
      }
    }
    std::string defect;
    FiaPlan plan;
    if (planned([&] { plan = plan_fia(a, testing::kPlanArch); }, &defect)) {
      ++accepted;
      SCOPED_TRACE("case " + std::to_string(i));
      for (const TensorView* t : {&a.query, &a.key, &a.value, &a.attention_out})
        ASSERT_TRUE(well_formed(*t)) << "accepted a malformed tensor " << t->shape_string();
      if (a.softmax_lse_flag) ASSERT_TRUE(well_formed(a.softmax_lse)) << a.softmax_lse.shape_string();
      ASSERT_TRUE(plan.batch >= 1 && plan.num_kv_heads >= 1 && plan.params.group >= 1 && plan.params.group <= 64);
      ASSERT_TRUE(std::isfinite(plan.params.scale));
      // The work list of every launch chunk adds up without overflow.
      for (int first = 0; first < plan.batch; first += kPrefillMaxBatches) {
        PrefillParams p = plan.params;
        const int n = std::min(kPrefillMaxBatches, plan.batch - first);
        ASSERT_GE(fia_fill_work(plan, a, first, n, p), 0);
        for (int b = 0; b < n; ++b) {
          ASSERT_GE(p.batches[b].q_len, 0);
          ASSERT_GE(p.batches[b].kv_len, 0);
        }
      }
      ASSERT_EQ(spec::KernelSpec::from_name(plan.spec.name()), plan.spec) << plan.spec.name();
      // The rarer arguments: accepted tensors are well formed, and the kernel gets what it reads.
      for (const TensorView* t : {&a.key_shared_prefix, &a.value_shared_prefix, &a.quant_scale2, &a.quant_offset2})
        if (present(*t)) ASSERT_TRUE(well_formed(*t)) << "accepted a malformed tensor " << t->shape_string();
      ASSERT_EQ(plan.spec.out_dtype == DType::kInt8, present(a.quant_scale2));
      ASSERT_EQ(plan.params.quant_scale != nullptr, present(a.quant_scale2));
      if (plan.spec.has(spec::feature::kSharedPrefix)) {
        ASSERT_TRUE(plan.params.kp && plan.params.vp && plan.params.prefix_seq >= 1);
        ASSERT_EQ(plan.spec.page_size, 0);
      }
      // Quantised K/V: the key's dtype (the dequantising pass's, when int8 is dequantised
      // first: the attention then reads 16-bit copies), descriptors for both, every scale
      // read inside its tensor.
      const DType kv_read = plan.dequant_first ? plan.dequant_first->pass.kv_dtype : plan.spec.kv_dtype;
      ASSERT_EQ(kv_read, a.key.dtype == i8 || a.key.dtype == i4 ? a.key.dtype : a.query.dtype);
      if (plan.dequant_first) {
        ASSERT_EQ(plan.spec.kv_dtype, plan.spec.q_dtype);
        ASSERT_EQ(plan.spec.page_size, 0);
        ASSERT_TRUE(plan.dequant_first->pass.has(spec::feature::kDequantPass));
        ASSERT_TRUE(prefill_can_implement(plan.dequant_first->pass, testing::kPlanArch, nullptr));
      }
      if (a.query.dtype == i8) {  // the full int8 path: the pass reads Q/K/V and the three scales
        ++quantised;
        ASSERT_TRUE(plan.dequant_first.has_value());
        ASSERT_EQ(plan.dequant_first->pass.q_dtype, i8);
        ASSERT_EQ(plan.dequant_first->pass.kv_dtype, i8);
        ASSERT_EQ(plan.spec.q_dtype, DType::kFloat16);
        ASSERT_GT(plan.dequant_first->q_bytes, 0u);
        ASSERT_EQ(plan.params.k_dq.scale, nullptr);
        const PrefillDequantOut& o = plan.dequant_first->out;
        ASSERT_EQ(o.dequant_scale1, a.dequant_scale1.data);
        ASSERT_EQ(o.quant_scale1, a.quant_scale1.data);
        ASSERT_EQ(o.dequant_scale2, a.dequant_scale2.data);
        for (const TensorView* t : {&a.dequant_scale1, &a.quant_scale1, &a.dequant_scale2})
          ASSERT_TRUE((t->rank == 0 || well_formed(*t)) && t->data && t->numel() == 1 && t->dtype == DType::kFloat32)
              << t->shape_string();  // one value: a rank-0 scalar tensor is one too
      } else if (kv_read != plan.spec.q_dtype) {
        ++quantised;
        const bool sep = present(a.key_antiquant_scale);
        const TensorView& ks = sep ? a.key_antiquant_scale : a.antiquant_scale;
        const TensorView& vs = sep ? a.value_antiquant_scale : a.antiquant_scale;
        const TensorView& ko = sep ? a.key_antiquant_offset : a.antiquant_offset;
        const TensorView& vo = sep ? a.value_antiquant_offset : a.antiquant_offset;
        ASSERT_TRUE(well_formed(ks) && well_formed(vs)) << ks.shape_string() << " " << vs.shape_string();
        ASSERT_EQ(plan.params.k_dq.offset != nullptr, present(ko));
        ASSERT_EQ(plan.params.v_dq.offset != nullptr, present(vo));
        expect_dq_inside(plan.params.k_dq, plan.params.k_dq.scale, ks, plan, a);
        expect_dq_inside(plan.params.v_dq, plan.params.v_dq.scale, vs, plan, a);
        if (present(ko)) expect_dq_inside(plan.params.k_dq, plan.params.k_dq.offset, ko, plan, a);
        if (present(vo)) expect_dq_inside(plan.params.v_dq, plan.params.v_dq.offset, vo, plan, a);
        // The decode kernel takes only int8: scales that vary by head and channel (its q
        // folds K's, its output applies V's) or fp32 per-token ones (tok_*); int4 stays prefill.
        const auto by_channel = [](const PrefillDequant& q) { return q.sb == 0 && q.ss == 0 && !q.paged; };
        const auto by_token = [](const PrefillDequant& q) { return q.dtype == prefill_dq::kFloat32 && q.sd == 0; };
        const auto d = plan_fia_decode(plan, a, testing::kPlanArch);
        if (d) {
          ASSERT_EQ(plan.spec.kv_dtype, DType::kInt8);
          ASSERT_EQ(d->spec.kv_dtype, DType::kInt8);
          for (int i = 0; i < 2; ++i) {
            const PrefillDequant& q = i ? plan.params.v_dq : plan.params.k_dq;
            const bool tok = d->spec.has(i ? spec::feature::kVTokenScale : spec::feature::kKTokenScale);
            ASSERT_TRUE(tok ? by_token(q) : by_channel(q));
            ASSERT_EQ(tok ? d->params.tok_scale[i] : i ? d->params.v_chan : d->params.k_chan, q.scale);
            if (tok) ASSERT_EQ(d->params.tok_paged[i], q.paged);
          }
          if (!d->spec.has(spec::feature::kVTokenScale)) ASSERT_EQ(d->params.v_chan_off, plan.params.v_dq.offset);
        }
      } else {
        ASSERT_EQ(plan.params.k_dq.scale, nullptr);
      }
      if (plan.spec.has(spec::feature::kLeftPad)) {
        ASSERT_TRUE(plan.params.q_pad || plan.params.kv_pad);
        ASSERT_EQ(plan.spec.page_size, 0);
        ASSERT_FALSE(plan.spec.has(spec::feature::kSharedPrefix));
      }
      // The decode route never throws on an accepted plan, and its kernel never
      // addresses past what plan_fia checked (the pages a row may walk cover its length).
      if (const auto d = plan_fia_decode(plan, a, testing::kPlanArch)) {
        ASSERT_TRUE(plan.decode && !a.softmax_lse_flag);
        ASSERT_EQ(spec::KernelSpec::from_name(d->spec.name()), d->spec) << d->spec.name();
        const int64_t reach = d->spec.page_size ? int64_t(d->params.pages_per_seq) * d->spec.page_size : plan.kv_seq;
        for (int b = 0; b < plan.batch; ++b) ASSERT_LE(fia_lengths(plan, a, b).kv_len, reach);
        ASSERT_EQ(d->params.batch, plan.batch);
      }
    } else {
      ASSERT_TRUE(defect.empty()) << "case " << i << ": " << defect;
    }
  }
  EXPECT_GT(accepted, kCases / 50);
  EXPECT_LT(accepted, kCases / 2);
  EXPECT_GT(quantised, kCases / 100) << accepted;  // the antiquant paths are reached
}

// MLA inside FIA (query_rope/key_rope): plan_fia, then plan_fia_mla, from a valid rope call.
TEST(OpFuzz, FiaMlaPlansOrNamesTheArgument) {
  Mutator mu(20261202);
  int accepted = 0;
  static const char* kLayouts[] = {"BSH", "BSND", "BNSD", "BNSD_BSND", "TND", "NZ", "BSH_NZ", ""};
  for (int i = 0; i < kCases; ++i) {
    static const int kQs[] = {1, 2, 16};
    static const int kHeads[] = {32, 64, 128};
    FiaArgs a = testing::valid_fia_mla(kQs[mu.below(3)], kLayouts[mu.below(3)], mu.coin() ? 16 : 128, kHeads[mu.below(3)]);
    const int edits = 1 + mu.below(3);
    for (int e = 0; e < edits; ++e) {
      switch (mu.below(22)) {
        case 0: mu.tensor(a.query); break;
        case 1: mu.tensor(a.query_rope); break;
        case 2: mu.tensor(a.key); break;
        case 3: mu.tensor(a.key_rope); break;
        case 4: mu.tensor(a.value); break;
        case 5: mu.tensor(a.attention_out); break;
        case 6: mu.tensor(a.softmax_lse); break;
        case 7: mu.tensor(a.atten_mask); break;
        case 8: mu.tensor(a.block_table); break;
        case 9: mu.tensor(mu.coin() ? a.pse_shift : a.kv_padding_size); break;
        case 10: a.num_heads = mu.small_int(); break;
        case 11: a.num_key_value_heads = mu.small_int(); break;
        case 12: a.sparse_mode = mu.small_int(); break;
        case 13: a.block_size = mu.small_int(); break;
        case 14: a.input_layout = kLayouts[mu.below(8)]; break;
        case 15: a.actual_seq_lengths.assign(size_t(mu.below(4)), int64_t(mu.small_int())); break;
        case 16: a.actual_seq_lengths_kv.assign(size_t(mu.below(4)), int64_t(mu.small_int())); break;
        case 17: a.softmax_lse_flag = mu.coin(); break;
        case 18: a.scale = mu.scalar(); break;
        case 19: a.backend = mu.any_enum<Backend>(3); break;
        case 20: a.value = a.key; break;
        default: a.inner_precise = mu.small_int();
      }
    }
    std::string defect;
    std::optional<FiaMlaPlan> m;
    if (planned([&] { m = plan_fia_mla(plan_fia(a, testing::kPlanArch), a, testing::kPlanArch); }, &defect)) {
      SCOPED_TRACE("case " + std::to_string(i));
      if (!m) {  // both rope tensors mutated away: the plain FIA path
        ASSERT_FALSE(fia_uses_mla(a));
        continue;
      }
      ++accepted;
      for (const TensorView* t : {&a.query, &a.query_rope, &a.key, &a.key_rope, &a.attention_out, &a.block_table})
        ASSERT_TRUE(well_formed(*t)) << "accepted a malformed tensor " << t->shape_string();
      if (a.softmax_lse_flag) ASSERT_TRUE(well_formed(a.softmax_lse)) << a.softmax_lse.shape_string();
      const MlaParams& p = m->params;
      ASSERT_TRUE(p.num_heads == 32 || p.num_heads == 64 || p.num_heads == 128) << p.num_heads;
      ASSERT_TRUE(p.q_len >= 1 && p.q_len <= 16) << p.q_len;
      ASSERT_TRUE(m->spec.page_size == 16 || m->spec.page_size == 128) << m->spec.page_size;
      ASSERT_TRUE(std::isfinite(p.bmm1_scale));
      ASSERT_EQ(p.rows_per_group, p.q_len * p.num_heads);
      // Every length the kernel may walk stays inside the block table.
      const int64_t reach = int64_t(p.pages_per_seq) * m->spec.page_size;
      ASSERT_LE(m->shape.range, std::max<int64_t>(reach, 1));
      if (m->lens.empty()) {
        ASSERT_LE(p.kv_len, reach);
      } else {
        ASSERT_EQ(m->lens.size(), size_t(2 * p.batch));
        for (int b = 0; b < p.batch; ++b) {
          ASSERT_TRUE(m->lens[size_t(b)] >= 0 && m->lens[size_t(b)] <= reach);
          ASSERT_TRUE(m->lens[size_t(p.batch + b)] >= 0 && m->lens[size_t(p.batch + b)] <= p.q_len);
        }
      }
      ASSERT_EQ(spec::KernelSpec::from_name(m->spec.name()), m->spec) << m->spec.name();
      std::string why;
      ASSERT_TRUE(mla_can_implement(m->spec, m->spec.arch, &why)) << m->spec.name() << ": " << why;
    } else {
      ASSERT_TRUE(defect.empty()) << "case " << i << ": " << defect;
    }
  }
  EXPECT_GT(accepted, kCases / 50);
  EXPECT_LT(accepted, kCases / 2);
}

TEST(OpFuzz, MlaPlansOrNamesTheArgument) {
  Mutator mu(20261201);
  int accepted = 0;
  for (int i = 0; i < kCases; ++i) {
    MlaArgs a = testing::valid_mla(mu.coin(), mu.coin());
    // Start from an fp8 e4m3 cache (a bf16 or an fp8 query) a third of the time.
    if (mu.below(3) == 0) {
      a.kv_cache.dtype = DType::kFloat8E4M3;
      if (mu.coin()) a.query.dtype = DType::kFloat8E4M3;
    }
    if (mu.below(4) == 0) a.workspace_buffer = TensorView::contiguous(fake(0x800000), DType::kUInt8, {1 << 20});
    if (mu.below(4) == 0) a.sinks = TensorView::contiguous(fake(0x820000), DType::kFloat32, {testing::kMlaHeads});
    if (mu.below(4) == 0)
      a.lse = TensorView::contiguous(fake(0x840000), DType::kFloat32,
                                     {testing::kMlaBatch * testing::kMlaQLen, testing::kMlaHeads});
    const int edits = 1 + mu.below(3);
    for (int e = 0; e < edits; ++e) {
      switch (mu.below(20)) {
        case 0: mu.tensor(a.query); break;
        case 1: mu.tensor(a.kv_cache); break;
        case 2: mu.tensor(a.block_tables); break;
        case 3: mu.tensor(a.seq_lens); break;
        case 4: mu.tensor(a.out); break;
        case 5: mu.tensor(a.workspace_buffer); break;
        case 6: mu.tensor(a.sinks); break;
        case 7: mu.tensor(a.indices); break;
        case 8: mu.tensor(a.lse); break;
        case 9: a.qk_nope_head_dim = mu.small_int(); break;
        case 10: a.kv_lora_rank = mu.small_int(); break;
        case 11: a.qk_rope_head_dim = mu.small_int(); break;
        case 12: a.max_seq_len = mu.small_int(); break;
        case 13: a.sparse_mla_top_k = mu.small_int(); break;
        case 14: a.bmm1_scale = mu.coin() ? ScaleArg(mu.scalar()) : ScaleArg(static_cast<const float*>(fake(0x830000))); break;
        case 15: a.bmm2_scale = mu.coin() ? ScaleArg(mu.scalar()) : ScaleArg(static_cast<const float*>(fake(0x830000))); break;
        case 16: a.sm_count = mu.small_int(); break;
        case 17: a.lse_base = mu.any_enum<LseBase>(2); break;
        default: a.backend = mu.any_enum<Backend>(3);
      }
    }
    std::string defect;
    MlaPlan plan;
    if (planned([&] { plan = plan_mla(a, testing::kPlanArch); }, &defect)) {
      ++accepted;
      SCOPED_TRACE("case " + std::to_string(i));
      for (const TensorView* t : {&a.query, &a.kv_cache, &a.block_tables, &a.seq_lens, &a.out})
        ASSERT_TRUE(well_formed(*t)) << "accepted a malformed tensor " << t->shape_string();
      if (a.sparse_mla_top_k > 0) ASSERT_TRUE(well_formed(a.indices)) << a.indices.shape_string();
      const MlaShape& s = plan.shape;
      ASSERT_TRUE(s.batch >= 1 && s.num_heads >= 1 && s.num_heads <= 128) << s.num_heads;
      ASSERT_TRUE(s.q_len >= 1 && s.q_len <= 16) << s.q_len;
      ASSERT_GE(s.range, 1);
      ASSERT_LE(int64_t(a.max_seq_len), int64_t(plan.params.pages_per_seq) * plan.spec.page_size);
      if (!a.bmm1_scale.device_ptr) ASSERT_TRUE(std::isfinite(a.bmm1_scale.value) && a.bmm1_scale.value > 0.f);
      if (!a.bmm2_scale.device_ptr) ASSERT_TRUE(std::isfinite(a.bmm2_scale.value) && a.bmm2_scale.value > 0.f);
      ASSERT_EQ(spec::KernelSpec::from_name(plan.spec.name()), plan.spec) << plan.spec.name();
      // Whatever validation accepts (fp8 KV and fp8 queries included), a kernel serves.
      std::string why;
      ASSERT_TRUE(mla_can_implement(plan.spec, plan.spec.arch, &why)) << plan.spec.name() << ": " << why;
    } else {
      ASSERT_TRUE(defect.empty()) << "case " << i << ": " << defect;
    }
  }
  EXPECT_GT(accepted, kCases / 50);
  EXPECT_LT(accepted, kCases / 2);
}

}  // namespace
}  // namespace attnjit::ops
