#include "attnjit/tensor.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit {

size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kUInt16: return 2;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32: return 4;
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
    case DType::kInt8:
    case DType::kUInt8: return 1;
    case DType::kInt64: return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat32: return "fp32";
    case DType::kFloat8E4M3: return "fp8_e4m3";
    case DType::kFloat8E5M2: return "fp8_e5m2";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kUInt16: return "uint16";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kInt64: return "int64";
  }
  return "?";
}

namespace {
// Methods of a view whose rank a caller set out of range read only the arrays.
int stored_rank(int rank) { return rank < 0 ? 0 : (rank > kMaxRank ? kMaxRank : rank); }
}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("TensorView::contiguous: rank {} is more than kMaxRank ({})", shape.size(), kMaxRank));
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t st = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = st;
    st *= t.shape[d];
  }
  return t;
}

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;  // saturates instead of overflowing: callers compare it against a need
  for (int d = 0; d < stored_rank(rank); ++d)
    if (__builtin_mul_overflow(n, shape[d], &n)) return INT64_MAX;
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  int64_t st = 1;
  for (int d = stored_rank(rank) - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != st) return false;
    // An overflowing product is no stride that exists: wrapped, it could match one.
    if (d > 0 && __builtin_mul_overflow(st, shape[d], &st)) return false;
  }
  return true;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < stored_rank(rank); ++d) s += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return s + (rank > kMaxRank ? ", ...]" : "]");
}

}  // namespace attnjit
