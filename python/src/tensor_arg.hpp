// Python tensors -> attnjit::TensorView: DLPack (__dlpack__) for torch, CuPy, JAX,
// numpy..., and ShapeOnly for prewarming. Nothing is copied.
#pragma once

#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit_py {

// A tensor with shape and dtype but no data, for prewarm and shape-only checks.
struct ShapeOnly {
  attnjit::TensorView view;
};

// Launch: every tensor must live on one CUDA device. Prewarm: only shapes and
// dtypes matter, so host arrays and ShapeOnly are accepted too.
enum class Mode { kLaunch, kPrewarm };

// Converts the arguments of one call, checking that the tensors share a device.
// Keeps every DLPack export alive until it is destroyed (after the launch).
class TensorArgs {
 public:
  explicit TensorArgs(Mode mode) : mode_(mode) {}
  // None gives an absent (default) view; `name` is the op's argument name.
  attnjit::TensorView tensor(nanobind::handle obj, const char* name);
  // A float, or a one-element fp32 device tensor read by the kernel.
  attnjit::ScaleArg scale(nanobind::handle obj, const char* name);
  Mode mode() const { return mode_; }

 private:
  static constexpr int kMaxTensors = 16;
  Mode mode_;
  int device_id_ = -1;
  const char* device_arg_ = nullptr;
  int count_ = 0;
  // Read-only import: JAX exports read-only arrays, and the unversioned capsule nanobind
  // asks for first then is the cheaper one. Writability is the caller's (as in FlashInfer).
  nanobind::ndarray<nanobind::ro> keep_[kMaxTensors];
};

// Scalars, named when they do not convert (nanobind's own TypeError names no argument):
// an int (or anything with __index__, numpy's too) within C int's range; None gives nullopt.
int int_arg(nanobind::handle obj, const char* name);
std::optional<int> optional_int_arg(nanobind::handle obj, const char* name);

attnjit::DType dtype_from_name(const std::string& name);
attnjit::KvLayout layout_from_name(const std::string& name);
attnjit::PosEncodingMode pos_encoding_from_name(const std::string& name);
attnjit::Backend backend_from_name(const std::string& name);

void bind_tensor_types(nanobind::module_& m);

}  // namespace attnjit_py
