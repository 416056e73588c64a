// fused_infer_attention_score's quantised K/V (antiquant): int8 K/V, or int4 packed
// eight to an int32, dequantised in registers as (x + offset) * scale. The seed's
// constraints on the combined antiquant_scale/offset (K at index 0, V at 1) and the
// separate key_/value_antiquant_scale/offset (modes 0-5), then spec.kv_dtype and the
// PrefillDequant descriptors k_dq / v_dq (prefill_params.cuh: one strided formula).
#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "attnjit/error.hpp"
#include "ops/common/validate.hpp"
#include "ops/fia/fia_plan.hpp"

namespace attnjit::ops {

namespace {

[[noreturn]] void unsupported(const char* arg, const std::string& why) {
  throw Error(ErrorCode::kUnsupported, fmt::format("argument '{}': {}", arg, why));
}

bool quantised(DType t) { return t == DType::kInt8 || t == DType::kInt32; }

// The shapes a scale or offset tensor may take. The separate params' modes, the
// (B, S) per-token shape of Q_S > 1, and the combined param's two (K at index 0, V at 1).
enum class Kind { kChannel, kToken, kHead, kTokenHead, kPage, kPageHead, kTokenQs, kComboChannel, kComboToken };

// Where one tensor's element (b, h, pos, d) is: the descriptor's strides.
struct DqStrides {
  long long sb = 0, sh = 0, ss = 0, sd = 0;
  int paged = 0;
  bool operator==(const DqStrides& o) const {
    return sb == o.sb && sh == o.sh && ss == o.ss && sd == o.sd && paged == o.paged;
  }
};

struct Ctx {
  const FiaArgs& a;
  const FiaDims& d;
  bool int4;
  int64_t need_s;  // per-token scales cover positions [0, need_s): the key's S, or the longest paged length
};

bool dims_are(const TensorView& t, std::initializer_list<int64_t> want) {
  if (t.rank != int(want.size())) return false;
  int i = 0;
  for (int64_t w : want)
    if (t.shape[i++] != w) return false;
  return true;
}
// Leading dims exactly `lead`, then a last dim of at least min_last.
bool dims_then_at_least(const TensorView& t, std::initializer_list<int64_t> lead, int64_t min_last) {
  if (t.rank != int(lead.size()) + 1 || t.shape[t.rank - 1] < min_last) return false;
  int i = 0;
  for (int64_t w : lead)
    if (t.shape[i++] != w) return false;
  return true;
}

// The kernel adds up to four stride * index products: the farthest element must stay
// far inside int64 (and the product of a wild stride must not overflow here either).
void check_reach(const TensorView& t, const char* name) {
  constexpr uint64_t kLimit = uint64_t(1) << 48;
  uint64_t reach = 0;
  for (int i = 0; i < t.rank; ++i) {
    const int64_t s = t.stride[i];
    const uint64_t mag = s < 0 ? uint64_t(0) - uint64_t(s) : uint64_t(s), n = uint64_t(t.shape[i] - 1);
    uint64_t r = 0;
    if (__builtin_mul_overflow(mag, n, &r) || __builtin_add_overflow(reach, r, &reach) || reach > kLimit)
      invalid(name, "strides that keep every element within 2^48 elements", fmt::format("stride {} in dim {}", s, i));
  }
}

const char* kind_dtype_why(Kind k) {
  switch (k) {
    case Kind::kChannel: case Kind::kHead: case Kind::kComboChannel: return "the query's (per channel, tensor or head)";
    default: return "float32 (per token)";
  }
}

// Validates one scale or offset tensor of this kind; returns where its elements are.
DqStrides check_one(const TensorView& t, const char* name, Kind kind, const Ctx& c) {
  const FiaDims& d = c.d;
  const int64_t N = d.KN, D = d.D, H = d.KN * d.D, B = d.B, S = c.need_s;
  require_defined(t, name);
  const bool token = kind != Kind::kChannel && kind != Kind::kHead && kind != Kind::kComboChannel;
  const DType want = token ? DType::kFloat32 : c.a.query.dtype;
  ATTNJIT_REQUIRE(t.dtype == want, name, fmt::format("dtype {}: {}", dtype_name(want), kind_dtype_why(kind)),
                  std::string("dtype ") + dtype_name(t.dtype));
  require_aligned(t, name, int(dtype_size(t.dtype)));
  check_reach(t, name);
  DqStrides st;
  const int64_t* x = t.stride;
  const bool bnsd = d.layout == FiaLayout::kBNSD || d.layout == FiaLayout::kBNSD_BSND;
  switch (kind) {
    case Kind::kChannel: {
      if (dims_are(t, {1, N, 1, D})) st.sh = x[1], st.sd = x[3];
      else if (dims_are(t, {1, N, D})) st.sh = x[1], st.sd = x[2];
      else if (dims_are(t, {1, H})) st.sh = D * x[1], st.sd = x[1];
      else if (dims_are(t, {1}) && !c.int4) break;  // per tensor: every stride 0
      else
        invalid(name, fmt::format("(1, {0}, 1, {1}), (1, {0}, {1}) or (1, {2}) (per channel){3}", N, D, H,
                                  c.int4 ? " (int4: per tensor (1,) is int8 only)" : ", or (1,) (per tensor)"),
                t.shape_string());
      break;
    }
    case Kind::kHead:
      if (!dims_are(t, {N})) invalid(name, fmt::format("({},) (per tensor and head)", N), t.shape_string());
      st.sh = x[0];
      break;
    case Kind::kToken:
      if (!dims_then_at_least(t, {1, B}, S))
        invalid(name, fmt::format("(1, {}, S) with S >= {} (per token)", B, S), t.shape_string());
      st.sb = x[1], st.ss = x[2];
      break;
    case Kind::kTokenQs:
      if (!dims_then_at_least(t, {B}, S))
        invalid(name, fmt::format("({}, S) with S >= {} (per token, Q_S > 1)", B, S), t.shape_string());
      st.sb = x[0], st.ss = x[1];
      break;
    case Kind::kTokenHead:
      if (!dims_then_at_least(t, {B, N}, S))
        invalid(name, fmt::format("({}, {}, S) with S >= {} (per token and head)", B, N, S), t.shape_string());
      st.sb = x[0], st.sh = x[1], st.ss = x[2];
      break;
    case Kind::kPage:
      if (!dims_are(t, {c.a.key.shape[0], c.a.block_size}))
        invalid(name, fmt::format("({}, {}) (blocknum, block_size: per token, page-managed)", c.a.key.shape[0],
                                  c.a.block_size), t.shape_string());
      st.sb = x[0], st.ss = x[1], st.paged = 1;
      break;
    case Kind::kPageHead:
      if (!dims_are(t, {c.a.key.shape[0], N, c.a.block_size}))
        invalid(name, fmt::format("({}, {}, {}) (blocknum, N, block_size: per token and head, page-managed)",
                                  c.a.key.shape[0], N, c.a.block_size), t.shape_string());
      st.sb = x[0], st.sh = x[1], st.ss = x[2], st.paged = 1;
      break;
    case Kind::kComboChannel: {
      // Per channel in the layout's shape; (2,) per tensor. Index 0 of dim 0 is K's.
      if (dims_are(t, {2})) break;
      if (bnsd && dims_are(t, {2, N, 1, D})) st.sh = x[1], st.sd = x[3];
      else if (d.layout == FiaLayout::kBSND && dims_are(t, {2, N, D})) st.sh = x[1], st.sd = x[2];
      else if (d.layout == FiaLayout::kBSH && dims_are(t, {2, H})) st.sh = D * x[1], st.sd = x[1];
      else
        invalid(name, fmt::format("{} (per channel, input_layout {}) or (2,) (per tensor)",
                                  bnsd ? fmt::format("(2, {}, 1, {})", N, D)
                                  : d.layout == FiaLayout::kBSND ? fmt::format("(2, {}, {})", N, D)
                                                                  : fmt::format("(2, {})", H),
                                  c.a.input_layout),
                t.shape_string());
      break;
    }
    case Kind::kComboToken:
      if (!dims_then_at_least(t, {2, B}, S))
        invalid(name, fmt::format("(2, {}, S) with S >= {} (per token, antiquant_mode 1)", B, S), t.shape_string());
      st.sb = x[1], st.ss = x[2];
      break;
  }
  return st;
}

// An offset: its scale's shape and dtype, and the same element addresses (one
// descriptor's strides serve both).
void check_offset(const TensorView& off, const char* name, const TensorView& scale, const char* scale_name,
                  const DqStrides& scale_st, Kind kind, const Ctx& c) {
  require_defined(off, name);
  ATTNJIT_REQUIRE(off.dtype == scale.dtype, name, fmt::format("dtype {}, as {}", dtype_name(scale.dtype), scale_name),
                  std::string("dtype ") + dtype_name(off.dtype));
  ATTNJIT_REQUIRE(off.shape_string() == scale.shape_string(), name,
                  fmt::format("{}'s shape {}", scale_name, scale.shape_string()), off.shape_string());
  const DqStrides st = check_one(off, name, kind, c);
  ATTNJIT_REQUIRE(st == scale_st, name, fmt::format("the strides of {} (one descriptor addresses both)", scale_name),
                  "other strides");
}

int dq_dtype(DType t) {
  return t == DType::kFloat32 ? prefill_dq::kFloat32 : t == DType::kFloat16 ? prefill_dq::kFloat16 : prefill_dq::kBFloat16;
}

PrefillDequant descriptor(const void* scale, const void* offset, const DqStrides& st, DType dtype) {
  return PrefillDequant{scale, offset, st.sb, st.sh, st.ss, st.sd, dq_dtype(dtype), st.paged};
}

// Index 1 of dim 0 (V's half of the combined param); null stays null (prewarm: shapes only).
const void* second(const TensorView& t) {
  if (!t.data) return nullptr;
  return static_cast<const char*>(t.data) + t.stride[0] * int64_t(dtype_size(t.dtype));
}

Kind separate_kind(int64_t mode, bool decode) {
  if (!decode) return Kind::kTokenQs;
  static constexpr Kind kByMode[] = {Kind::kChannel, Kind::kToken, Kind::kHead, Kind::kTokenHead, Kind::kPage, Kind::kPageHead};
  return kByMode[mode];
}
bool per_token(int64_t mode) { return mode == 1 || mode == 3 || mode == 4 || mode == 5; }

void plan_separate(const Ctx& c, FiaPlan& plan) {
  const FiaArgs& a = c.a;
  const FiaDims& d = c.d;
  const bool ks = present(a.key_antiquant_scale), vs = present(a.value_antiquant_scale);
  const bool ko = present(a.key_antiquant_offset), vo = present(a.value_antiquant_offset);
  ATTNJIT_REQUIRE(ks == vs, ks ? "value_antiquant_scale" : "key_antiquant_scale",
                  "key_antiquant_scale and value_antiquant_scale together (both or neither)", "only one of them");
  ATTNJIT_REQUIRE(ko == vo, ko ? "value_antiquant_offset" : "key_antiquant_offset",
                  "key_antiquant_offset and value_antiquant_offset together (both or neither)", "only one of them");
  ATTNJIT_REQUIRE(ks, "key_antiquant_scale", "key_/value_antiquant_scale with their offsets (an offset needs its scale)",
                  "offsets without scales");
  const int64_t km = a.key_antiquant_mode, vm = a.value_antiquant_mode;
  const bool prefix = present(a.key_shared_prefix);
  const char* sep = "with key_/value_antiquant_scale at Q_S > 1";
  if (!d.decode) {
    // The seed's Q_S > 1 rules: per token only, (B, S) fp32, bf16 in and out, S <= 16.
    ATTNJIT_REQUIRE(km == 1 && vm == 1, km != 1 ? "key_antiquant_mode" : "value_antiquant_mode",
                    "1 (per token; the only mode at Q_S > 1)", std::to_string(km != 1 ? km : vm));
    ATTNJIT_REQUIRE(d.QS <= 16, "query", fmt::format("S <= 16 {}", sep), fmt::format("S {}", d.QS));
    ATTNJIT_REQUIRE(a.query.dtype == DType::kBFloat16, "query", fmt::format("dtype bf16 {}", sep),
                    std::string("dtype ") + dtype_name(a.query.dtype));
    ATTNJIT_REQUIRE(!present(a.quant_scale2), "quant_scale2", fmt::format("none {} (the output is bf16)", sep),
                    a.quant_scale2.shape_string());
    for (auto [t, n] : {std::pair{&a.query_padding_size, "query_padding_size"}, {&a.kv_padding_size, "kv_padding_size"},
                        {&a.key_shared_prefix, "key_shared_prefix"}})
      ATTNJIT_REQUIRE(!present(*t), n, fmt::format("none {} (no left padding, no prefix)", sep), t->shape_string());
  } else {
    for (auto [m, n] : {std::pair{km, "key_antiquant_mode"}, {vm, "value_antiquant_mode"}}) {
      if (c.int4)
        ATTNJIT_REQUIRE(m == 0 || m == 1 || m == 3, n, "0, 1 or 3 with int4 (int32) key/value (2, 4 and 5: int8 only)",
                        std::to_string(m));
      if (m >= 4)
        ATTNJIT_REQUIRE(d.paged, n, "4 or 5 (page-managed scales) only with block_table", fmt::format("{} without", m));
      if (prefix && per_token(m))
        unsupported("key_shared_prefix", fmt::format("{} {} (per token): per-token scales of a shared prefix are not "
                                                     "defined by the seed (per channel, tensor or head serve)", n, m));
    }
    if (km == 0 && vm == 1 && !c.int4) {  // the seed: int8 K/V in this mix, fp16 in and out only
      ATTNJIT_REQUIRE(a.query.dtype == DType::kFloat16, "query",
                      "dtype fp16 with int8 key/value, key_antiquant_mode 0 and value_antiquant_mode 1",
                      std::string("dtype ") + dtype_name(a.query.dtype));
      ATTNJIT_REQUIRE(!present(a.quant_scale2), "quant_scale2",
                      "none with int8 key/value, key_antiquant_mode 0 and value_antiquant_mode 1 (the output is fp16)",
                      a.quant_scale2.shape_string());
    }
  }
  const Kind kk = separate_kind(km, d.decode), vk = separate_kind(vm, d.decode);
  const DqStrides kst = check_one(a.key_antiquant_scale, "key_antiquant_scale", kk, c);
  const DqStrides vst = check_one(a.value_antiquant_scale, "value_antiquant_scale", vk, c);
  if (km == vm)
    ATTNJIT_REQUIRE(a.value_antiquant_scale.shape_string() == a.key_antiquant_scale.shape_string(), "value_antiquant_scale",
                    "key_antiquant_scale's shape " + a.key_antiquant_scale.shape_string(),
                    a.value_antiquant_scale.shape_string());
  if (ko) {
    check_offset(a.key_antiquant_offset, "key_antiquant_offset", a.key_antiquant_scale, "key_antiquant_scale", kst, kk, c);
    check_offset(a.value_antiquant_offset, "value_antiquant_offset", a.value_antiquant_scale, "value_antiquant_scale",
                 vst, vk, c);
  }
  plan.params.k_dq = descriptor(a.key_antiquant_scale.data, ko ? a.key_antiquant_offset.data : nullptr, kst,
                                a.key_antiquant_scale.dtype);
  plan.params.v_dq = descriptor(a.value_antiquant_scale.data, vo ? a.value_antiquant_offset.data : nullptr, vst,
                                a.value_antiquant_scale.dtype);
}

void plan_combined(const Ctx& c, FiaPlan& plan) {
  const FiaArgs& a = c.a;
  const TensorView& s = a.antiquant_scale;
  const TensorView& o = a.antiquant_offset;
  ATTNJIT_REQUIRE(present(s), "antiquant_offset", "only together with antiquant_scale", "antiquant_offset alone");
  ATTNJIT_REQUIRE(!c.int4, "antiquant_scale",
                  "key_/value_antiquant_scale with int4 (int32) key/value (the combined antiquant_scale is int8 only)",
                  "antiquant_scale");
  Kind kind = Kind::kComboChannel;  // Q_S > 1 ignores antiquant_mode: per channel (or per tensor)
  if (!c.d.decode)
    ATTNJIT_REQUIRE(a.query.dtype == DType::kFloat16, "query",
                    "dtype fp16 with antiquant_scale at Q_S > 1 (the combined params dequantise int8 to fp16 only)",
                    std::string("dtype ") + dtype_name(a.query.dtype));
  else if (a.antiquant_mode == 1)
    kind = Kind::kComboToken;
  if (kind == Kind::kComboToken && present(a.key_shared_prefix))
    unsupported("key_shared_prefix", "antiquant_mode 1 (per token): per-token scales of a shared prefix are not defined "
                                     "by the seed (per channel or tensor serve)");
  const DqStrides st = check_one(s, "antiquant_scale", kind, c);
  if (present(o)) check_offset(o, "antiquant_offset", s, "antiquant_scale", st, kind, c);
  const void* off = present(o) ? o.data : nullptr;
  plan.params.k_dq = descriptor(s.data, off, st, s.dtype);
  plan.params.v_dq = descriptor(second(s), off ? second(o) : nullptr, st, s.dtype);
}

}  // namespace

void fia_check_antiquant_modes(const FiaArgs& a) {
  // Scalar modes: their ranges hold whether or not antiquant tensors are given.
  ATTNJIT_REQUIRE(a.antiquant_mode == 0 || a.antiquant_mode == 1, "antiquant_mode", "0 or 1",
                  std::to_string(a.antiquant_mode));
  ATTNJIT_REQUIRE(a.key_antiquant_mode >= 0 && a.key_antiquant_mode <= 5, "key_antiquant_mode", "0 to 5",
                  std::to_string(a.key_antiquant_mode));
  ATTNJIT_REQUIRE(a.value_antiquant_mode >= 0 && a.value_antiquant_mode <= 5, "value_antiquant_mode", "0 to 5",
                  std::to_string(a.value_antiquant_mode));
  ATTNJIT_REQUIRE(a.key_antiquant_mode == a.value_antiquant_mode ||
                      (a.key_antiquant_mode == 0 && a.value_antiquant_mode == 1),
                  "value_antiquant_mode", fmt::format("key_antiquant_mode ({}), or 1 with key mode 0", a.key_antiquant_mode),
                  std::to_string(a.value_antiquant_mode));
}

int fia_kv_pack(const FiaArgs& a, bool tnd, bool mla) {
  const DType kd = a.key.dtype;
  if (!quantised(kd)) return 1;
  if (mla) unsupported("key", "int8/int4 key/value with query_rope/key_rope (the quantised MLA path) is not supported yet");
  ATTNJIT_REQUIRE(!tnd, "key", "fp16/bf16 with input_layout TND (no antiquant)", std::string("dtype ") + dtype_name(kd));
  ATTNJIT_REQUIRE(a.value.dtype == kd, "value", fmt::format("dtype {}, as key", dtype_name(kd)),
                  std::string("dtype ") + dtype_name(a.value.dtype));
  return kd == DType::kInt32 ? 8 : 1;
}

void fia_plan_antiquant(const FiaArgs& a, const FiaDims& d, FiaPlan& plan) {
  const std::pair<const TensorView*, const char*> params[] = {
      {&a.antiquant_scale, "antiquant_scale"},         {&a.antiquant_offset, "antiquant_offset"},
      {&a.key_antiquant_scale, "key_antiquant_scale"}, {&a.key_antiquant_offset, "key_antiquant_offset"},
      {&a.value_antiquant_scale, "value_antiquant_scale"}, {&a.value_antiquant_offset, "value_antiquant_offset"}};
  if (!quantised(a.key.dtype)) {
    for (auto [t, n] : params)
      ATTNJIT_REQUIRE(!present(*t), n, "none with fp16/bf16 key/value (antiquant dequantises int8 or int4 key/value)",
                      t->shape_string());
    return;
  }
  if (a.query.dtype == DType::kInt8) {  // the full int8 path (fia_check_int8_query): no antiquant parameters
    ATTNJIT_REQUIRE(d.D % 32 == 0, "query", "a head dim that is a multiple of 32 with int8 query, key and value",
                    fmt::format("D {}", d.D));
    plan.spec.kv_dtype = DType::kInt8;
    return;
  }
  const bool int4 = a.key.dtype == DType::kInt32;
  const char* kv = int4 ? "int4 (int32) key/value" : "int8 key/value";
  if (int4) {  // the seed: Q_S = 1 only, D 64-aligned, no page attention, kv left padding or int8 output
    ATTNJIT_REQUIRE(d.decode, "key", "int4 (int32) only at Q_S = 1", fmt::format("Q_S {}", d.QS));
    ATTNJIT_REQUIRE(d.D % 64 == 0, "key", "a head dim that is a multiple of 64 with int4 (int32) key/value",
                    fmt::format("D {}", d.D));
    ATTNJIT_REQUIRE(!d.paged, "block_table", "none with int4 (int32) key/value", "a block table");
    ATTNJIT_REQUIRE(!present(a.kv_padding_size), "kv_padding_size", "none with int4 (int32) key/value (no kv left padding)",
                    a.kv_padding_size.shape_string());
    ATTNJIT_REQUIRE(!present(a.quant_scale2), "quant_scale2", "none with int4 (int32) key/value (no int8 output)",
                    a.quant_scale2.shape_string());
  } else if (!d.decode) {
    ATTNJIT_REQUIRE(d.D % 32 == 0, "key", "a head dim that is a multiple of 32 with int8 key/value at Q_S > 1",
                    fmt::format("D {}", d.D));
  } else if (d.paged) {
    ATTNJIT_REQUIRE(a.block_size % 32 == 0, "block_size", "a multiple of 32 with int8 key/value (Q_S = 1)",
                    std::to_string(a.block_size));
  }
  ATTNJIT_REQUIRE(d.decode || !d.paged, "block_table",
                  fmt::format("none with {} at Q_S > 1 (page attention has no antiquant there)", kv), "a block table");
  const bool separate = present(a.key_antiquant_scale) || present(a.value_antiquant_scale) ||
                        present(a.key_antiquant_offset) || present(a.value_antiquant_offset);
  ATTNJIT_REQUIRE(separate || present(a.antiquant_scale) || present(a.antiquant_offset), "antiquant_scale",
                  fmt::format("antiquant_scale or key_/value_antiquant_scale (needed with {})", kv), "none");
  int64_t need = d.KS;  // per-token positions: physical, or logical with paged KV
  if (d.paged) {
    need = 0;
    for (int b = 0; b < d.B; ++b) need = std::max<int64_t>(need, fia_lengths(plan, a, b).kv_len);
  }
  const Ctx c{a, d, int4, need};
  if (separate) plan_separate(c, plan);  // the separate params win: the combined ones are then ignored
  else plan_combined(c, plan);
  plan.spec.kv_dtype = a.key.dtype;
}

}  // namespace attnjit::ops
