// Turns fuzz bytes into edits of a valid op argument set (tests/common/op_args.hpp):
// the same kinds of breakage as tests/unit/op_fuzz_test.cpp, but chosen by libFuzzer,
// which then steers towards new validation branches. Also the checks both op targets
// make on the outcome.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/tensor.hpp"
#include "common/op_args.hpp"
#include "fuzz/fuzz_check.hpp"

namespace attnjit::fuzz {

class OpInput {
 public:
  explicit OpInput(FuzzedDataProvider& in) : in_(in) {}

  bool more() const { return in_.remaining_bytes() > 0; }
  int below(int n) { return in_.ConsumeIntegralInRange<int>(0, n - 1); }
  bool coin() { return in_.ConsumeBool(); }

  int64_t dim() {
    static const int64_t kDims[] = {-1, 0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 64, 100, 128, 256, 512,
                                    65536, int64_t(1) << 31, int64_t(1) << 40, INT64_MAX, INT64_MIN};
    switch (below(3)) {
      case 0: return kDims[below(sizeof(kDims) / sizeof(kDims[0]))];
      case 1: return in_.ConsumeIntegralInRange<int64_t>(1, 300);
      default: return in_.ConsumeIntegral<int64_t>();
    }
  }
  int any_int() {
    static const int kInts[] = {INT_MIN, -100, -2, -1, 0, 1, 2, 3, 4, 5, 8, 16, 24, 31, 32, 33, 64, 100, 128,
                                256, 1000, 65536, INT_MAX};
    return coin() ? kInts[below(sizeof(kInts) / sizeof(kInts[0]))] : in_.ConsumeIntegral<int>();
  }
  float scalar() {
    static const float kFloats[] = {-1.f, 0.f, 1e-30f, 0.5f, 1.f, 30.f, 1e30f,
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::denorm_min()};
    return coin() ? kFloats[below(sizeof(kFloats) / sizeof(kFloats[0]))] : in_.ConsumeFloatingPoint<float>();
  }
  // Any value of the enum's underlying range, including ones past the last enumerator.
  template <class E>
  E any_enum(int past_last) { return static_cast<E>(below(past_last + 3)); }

  void tensor(TensorView& t) {
    switch (below(10)) {
      case 0: t.rank = coin() ? below(kMaxRank + 3) : in_.ConsumeIntegral<int>(); break;
      case 1: t.shape[below(kMaxRank)] = dim(); break;
      case 2: t.stride[below(kMaxRank)] = coin() ? dim() : -(dim() & INT64_MAX); break;
      case 3: t.dtype = any_enum<DType>(int(DType::kInt64) + 1); break;
      case 4: t.data = nullptr; break;
      case 5: t.data = testing::fake(reinterpret_cast<uintptr_t>(t.data) + (1u << below(5))); break;  // misaligned
      case 6: t = TensorView{}; break;
      case 7: t.data = testing::fake(0x900000); break;  // present where it may have been absent
      case 8: t.data = testing::fake(in_.ConsumeIntegral<uintptr_t>()); break;
      default: {  // a well-formed view of another shape
        const int rank = 1 + below(kMaxRank);
        TensorView u;
        u.data = t.data ? t.data : testing::fake(0x900000);
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
  FuzzedDataProvider& in_;
};

// A refusal must be Error(kInvalidArgument or kUnsupported) naming the argument.
template <class F>
bool planned(F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    require_code(e, {ErrorCode::kInvalidArgument, ErrorCode::kUnsupported});
    const std::string what = e.what();
    check(what.find("argument '") != std::string::npos || what.find("backend") != std::string::npos,
          "a refusal that names no argument", what);
  }
  return false;
}

// What a launch relies on for an accepted tensor; shapes-only (prewarm) accepts null data.
inline void require_well_formed(const TensorView& t, bool shapes_only) {
  bool ok = t.rank >= 1 && t.rank <= kMaxRank && (shapes_only || t.data) && dtype_size(t.dtype) != 0;
  for (int d = 0; ok && d < t.rank; ++d) ok = t.shape[d] >= 1;
  check(ok, "accepted a malformed tensor", t.shape_string());
}

}  // namespace attnjit::fuzz
