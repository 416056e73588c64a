// Argument checks shared by every op: each failure throws Error(kInvalidArgument)
// naming the argument, what was expected and what was given.
#pragma once

#include <initializer_list>
#include <string>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit::ops {

[[noreturn]] void invalid(const std::string& arg, const std::string& expected, const std::string& given);

// Prewarming validates shapes and dtypes only: inside this scope (one thread)
// tensors may have null data, and a tensor counts as present when it has a rank.
class ShapesOnlyScope {
 public:
  ShapesOnlyScope();
  ~ShapesOnlyScope();
  ShapesOnlyScope(const ShapesOnlyScope&) = delete;
  ShapesOnlyScope& operator=(const ShapesOnlyScope&) = delete;

 private:
  bool previous_;
};
bool shapes_only();
// An optional tensor argument was given.
bool present(const TensorView& t);

// Data (or, prewarming, a shape), a rank in [0, kMaxRank] and every size >= 1.
void require_defined(const TensorView& t, const char* name);
void require_rank(const TensorView& t, const char* name, int rank, const char* layout);
void require_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
void require_dim(const TensorView& t, const char* name, int dim, int64_t expected, const char* what);
void require_inner_contiguous(const TensorView& t, const char* name);  // stride[-1] == 1
void require_contiguous(const TensorView& t, const char* name);
void require_aligned(const TensorView& t, const char* name, int bytes);  // data and strides
// A caller's scratch buffer (workspace_buffer): defined, contiguous, `align`-byte aligned and
// of a known dtype; returns its size in bytes.
size_t require_scratch_bytes(const TensorView& t, const char* name, int align);

// Scalars and enums (an enum may hold any value a caller cast into it).
void require_finite_positive(float value, const char* name);
void require_layout(KvLayout layout);  // "kv_layout"
void require_backend(Backend backend);  // "backend"

}  // namespace attnjit::ops

// Checks `cond`; the message strings are built only when it fails (launch path).
#define ATTNJIT_REQUIRE(cond, name, expected, given)            \
  do {                                                          \
    if (!(cond)) ::attnjit::ops::invalid((name), (expected), (given)); \
  } while (0)
