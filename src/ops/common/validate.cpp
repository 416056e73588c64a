#include "ops/common/validate.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "attnjit/error.hpp"

namespace attnjit::ops {

void invalid(const std::string& arg, const std::string& expected, const std::string& given) {
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("argument '{}': expected {}, got {}", arg, expected, given));
}

namespace {
thread_local bool t_shapes_only = false;
}

ShapesOnlyScope::ShapesOnlyScope() : previous_(t_shapes_only) { t_shapes_only = true; }
ShapesOnlyScope::~ShapesOnlyScope() { t_shapes_only = previous_; }
bool shapes_only() { return t_shapes_only; }
bool present(const TensorView& t) { return t.data != nullptr || (t_shapes_only && t.rank > 0); }

void require_defined(const TensorView& t, const char* name) {
  if (t_shapes_only) {
    if (t.rank <= 0) invalid(name, "a tensor (shape and dtype; data may be null when prewarming)", "none");
    return;
  }
  if (!t.data) invalid(name, "a device pointer", "null");
}

void require_rank(const TensorView& t, const char* name, int rank, const char* layout) {
  require_defined(t, name);
  if (t.rank != rank)
    invalid(name, fmt::format("rank {} {}", rank, layout), fmt::format("rank {} {}", t.rank, t.shape_string()));
}

void require_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (d == t.dtype) return;
  std::string list;  // built only on failure: this runs on every launch
  for (DType d : allowed) list += (list.empty() ? "" : " or ") + std::string(dtype_name(d));
  invalid(name, "dtype " + list, std::string("dtype ") + dtype_name(t.dtype));
}

void require_dim(const TensorView& t, const char* name, int dim, int64_t expected, const char* what) {
  if (t.shape[dim] != expected)
    invalid(name, fmt::format("size {} in dim {} ({})", expected, dim, what),
            fmt::format("{} (shape {})", t.shape[dim], t.shape_string()));
}

void require_inner_contiguous(const TensorView& t, const char* name) {
  if (t.rank > 0 && t.stride[t.rank - 1] != 1 && t.shape[t.rank - 1] != 1)
    invalid(name, "stride 1 in the last dim", fmt::format("stride {}", t.stride[t.rank - 1]));
}

void require_contiguous(const TensorView& t, const char* name) {
  if (!t.is_contiguous()) invalid(name, "a contiguous tensor", "strides that are not row-major");
}

void require_aligned(const TensorView& t, const char* name, int bytes) {
  if (reinterpret_cast<uintptr_t>(t.data) % bytes != 0)  // null (prewarm) passes
    invalid(name, fmt::format("a {}-byte aligned pointer", bytes), fmt::format("{}", t.data));
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 0; d + 1 < t.rank; ++d)
    if ((t.stride[d] * es) % bytes != 0)
      invalid(name, fmt::format("strides that are multiples of {} bytes", bytes),
              fmt::format("stride {} elements in dim {}", t.stride[d], d));
}

}  // namespace attnjit::ops
