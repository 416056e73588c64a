#include "ops/common/validate.hpp"

#include <fmt/format.h>

#include <cmath>
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

namespace {
void require_present(const TensorView& t, const char* name) {
  if (t.data && t.rank > 0) return;  // present in either mode (the launch path's case: no TLS read)
  if (t_shapes_only) {
    if (t.rank <= 0) invalid(name, "a tensor (shape and dtype; data may be null when prewarming)", "none");
  } else if (!t.data) {
    invalid(name, "a device pointer", "null");
  }
}
void require_positive_sizes(const TensorView& t, const char* name, const char* layout) {
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] < 1) invalid(name, fmt::format("sizes >= 1{}{}", *layout ? " in " : "", layout), t.shape_string());
}
}  // namespace

void require_defined(const TensorView& t, const char* name) {
  require_present(t, name);
  if (t.rank < 0 || t.rank > kMaxRank) invalid(name, fmt::format("rank 0 to {}", kMaxRank), fmt::format("rank {}", t.rank));
  require_positive_sizes(t, name, "");
}

void require_rank(const TensorView& t, const char* name, int rank, const char* layout) {
  require_present(t, name);
  if (t.rank != rank)
    invalid(name, fmt::format("rank {} {}", rank, layout), fmt::format("rank {} {}", t.rank, t.shape_string()));
  require_positive_sizes(t, name, layout);
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
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  // Both are powers of two in every call: (s * es) % b == 0 exactly when the low
  // bits of s that es does not cover are zero. Masks, not a 64-bit division per
  // stride: this runs for every tensor of every launch.
  const bool pow2 = bytes > 0 && (bytes & (bytes - 1)) == 0 && es > 0 && (es & (es - 1)) == 0;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(t.data);
  if (pow2 ? (addr & uintptr_t(bytes - 1)) != 0 : addr % bytes != 0)  // null (prewarm) passes
    invalid(name, fmt::format("a {}-byte aligned pointer", bytes), fmt::format("{}", t.data));
  const int64_t low_mask = pow2 && es < bytes ? bytes / es - 1 : 0;
  for (int d = 0; d + 1 < t.rank; ++d)
    if (pow2 ? (t.stride[d] & low_mask) != 0
             : (t.stride[d] % bytes) * es % bytes != 0)  // (s * es) % b without overflowing s * es
      invalid(name, fmt::format("strides that are multiples of {} bytes", bytes),
              fmt::format("stride {} elements in dim {}", t.stride[d], d));
}

size_t require_scratch_bytes(const TensorView& t, const char* name, int align) {
  require_defined(t, name);
  require_contiguous(t, name);
  require_aligned(t, name, align);
  ATTNJIT_REQUIRE(dtype_size(t.dtype) > 0, name, "a known dtype (uint8)",
                  fmt::format("enum value {}", static_cast<int>(t.dtype)));
  return static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
}

void require_finite_positive(float value, const char* name) {
  if (!(value > 0.f && std::isfinite(value))) invalid(name, "a finite value > 0", fmt::format("{}", value));
}

void require_layout(KvLayout layout) {
  if (layout != KvLayout::kNHD && layout != KvLayout::kHND)
    invalid("kv_layout", "NHD or HND", fmt::format("enum value {}", static_cast<int>(layout)));
}

void require_backend(Backend backend) {
  if (backend != Backend::kAuto && backend != Backend::kXqa && backend != Backend::kTrtllmGen)
    invalid("backend", "auto, xqa or trtllm-gen", fmt::format("enum value {}", static_cast<int>(backend)));
}

}  // namespace attnjit::ops
