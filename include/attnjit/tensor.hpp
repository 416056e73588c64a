// TensorView and DType: how a host hands device memory to attnjit (no ownership).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

struct CUstream_st;  // cudaStream_t and CUstream are both CUstream_st*

namespace attnjit {

using Stream = CUstream_st*;

enum class DType : uint8_t {
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat8E4M3,
  kFloat8E5M2,
  kInt8,
  kUInt8,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
};

size_t dtype_size(DType dtype) noexcept;
const char* dtype_name(DType dtype) noexcept;  // "bf16", "fp8_e4m3", ...

constexpr int kMaxRank = 6;

// A strided view of device memory. Strides are in elements, like PyTorch.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat16;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};

  // Row-major contiguous view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);

  bool defined() const noexcept { return data != nullptr; }
  int64_t size(int dim) const noexcept { return shape[dim < 0 ? dim + rank : dim]; }
  int64_t numel() const noexcept;
  bool is_contiguous() const noexcept;
  std::string shape_string() const;  // "[4, 32, 128]"
};

// A scale that is either a host float or a device fp32 pointer (read by the kernel).
struct ScaleArg {
  float value = 1.0f;
  const float* device_ptr = nullptr;
  ScaleArg() = default;
  ScaleArg(float v) : value(v) {}                        // NOLINT: implicit on purpose
  ScaleArg(const float* p) : device_ptr(p) {}            // NOLINT
};

}  // namespace attnjit
