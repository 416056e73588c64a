#include "tensor_arg.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "errors.hpp"

namespace nb = nanobind;
using attnjit::DType;

namespace attnjit_py {

namespace {
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

std::string device_name(int type, int id) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(id);
    case kDLCUDAHost: return "cuda pinned host memory";
    case kDLCUDAManaged: return "cuda managed:" + std::to_string(id);
    default: return "DLPack device type " + std::to_string(type);
  }
}

// DLPack (code, bits) -> DType; codes from dlpack.h (kDLInt 0, kDLUInt 1, kDLFloat 2,
// kDLBfloat 4, kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12).
bool dtype_from_dlpack(nb::dlpack::dtype t, DType* out) {
  if (t.lanes != 1) return false;
  using C = nb::dlpack::dtype_code;
  const auto code = static_cast<C>(t.code);
  switch (t.bits) {
    case 8:
      if (code == C::Int) { *out = DType::kInt8; return true; }
      if (code == C::UInt) { *out = DType::kUInt8; return true; }
      if (code == C::Float8_E4M3FN) { *out = DType::kFloat8E4M3; return true; }
      if (code == C::Float8_E5M2) { *out = DType::kFloat8E5M2; return true; }
      return false;
    case 16:
      if (code == C::Float) { *out = DType::kFloat16; return true; }
      if (code == C::Bfloat) { *out = DType::kBFloat16; return true; }
      if (code == C::UInt) { *out = DType::kUInt16; return true; }
      return false;
    case 32:
      if (code == C::Float) { *out = DType::kFloat32; return true; }
      if (code == C::Int) { *out = DType::kInt32; return true; }
      if (code == C::UInt) { *out = DType::kUInt32; return true; }
      return false;
    case 64:
      if (code == C::Int) { *out = DType::kInt64; return true; }
      return false;
    default: return false;
  }
}

std::string py_type_name(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

// torch fast path: torch.Tensor's __dlpack__ is Python code costing microseconds per
// tensor; its C exporter (torch._C._to_dlpack) makes the same capsule directly.
PyTypeObject* g_torch_tensor = nullptr;
PyObject* g_torch_to_dlpack = nullptr;

// A non-null address that is never dereferenced: a ShapeOnly scale tensor when
// prewarming selects the scale-pointer variant (the spec only asks "pointer or not").
const float* const kShapeOnlyScale = reinterpret_cast<const float*>(uintptr_t{256});
}  // namespace

attnjit::TensorView TensorArgs::tensor(nb::handle obj, const char* name) {
  if (obj.is_none()) return {};
  if (nb::isinstance<ShapeOnly>(obj)) {
    if (mode_ == Mode::kLaunch)
      invalid_argument(name, "a CUDA tensor (ShapeOnly has no data: it is for attnjit.prewarm)", "ShapeOnly");
    return nb::cast<const ShapeOnly&>(obj).view;
  }
  if (count_ == kMaxTensors) invalid_argument(name, "at most 16 tensors per call", "more");
  nb::ndarray<nb::ro>& arr = keep_[count_];
  bool imported = false;
  if (g_torch_to_dlpack != nullptr && Py_TYPE(obj.ptr()) == g_torch_tensor) {
    PyObject* capsule = PyObject_CallOneArg(g_torch_to_dlpack, obj.ptr());
    if (capsule != nullptr) {
      imported = nb::try_cast(nb::handle(capsule), arr, /*convert=*/false);
      Py_DECREF(capsule);
    } else {
      PyErr_Clear();  // the generic __dlpack__ path below reports the problem
    }
  }
  if (!imported && !nb::try_cast(obj, arr, /*convert=*/false))
    invalid_argument(name, "a tensor exporting __dlpack__ (torch, CuPy, JAX, numpy) or None", py_type_name(obj));
  ++count_;
  attnjit::TensorView v;
  if (!dtype_from_dlpack(arr.dtype(), &v.dtype))
    invalid_argument(name, "a dtype attnjit knows (fp16, bf16, fp32, fp8 e4m3fn/e5m2, int8/uint8/uint16/int32/uint32/int64)",
                     "DLPack dtype code " + std::to_string(arr.dtype().code) + " bits " +
                         std::to_string(arr.dtype().bits) + " lanes " + std::to_string(arr.dtype().lanes));
  if (arr.ndim() > attnjit::kMaxRank)
    invalid_argument(name, "rank <= " + std::to_string(attnjit::kMaxRank), "rank " + std::to_string(arr.ndim()));
  v.rank = static_cast<int>(arr.ndim());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = static_cast<int64_t>(arr.shape(d));
    v.stride[d] = arr.stride(d);
  }
  const int type = arr.device_type();
  if (mode_ == Mode::kLaunch) {
    if (type != kDLCUDA && type != kDLCUDAManaged)
      invalid_argument(name, "a CUDA tensor", "a tensor on " + device_name(type, arr.device_id()));
    if (device_arg_ == nullptr) {
      device_id_ = arr.device_id();
      device_arg_ = name;
    } else if (arr.device_id() != device_id_) {
      invalid_argument(name, std::string("a tensor on ") + device_name(kDLCUDA, device_id_) + " (" + device_arg_ + "'s device)",
                       device_name(type, arr.device_id()));
    }
  }
  v.data = const_cast<void*>(static_cast<const void*>(arr.data()));
  // An empty tensor may export a null pointer; the op's checks then name it.
  return v;
}

attnjit::ScaleArg TensorArgs::scale(nb::handle obj, const char* name) {
  if (obj.is_none()) return attnjit::ScaleArg(1.0f);
  if (PyFloat_Check(obj.ptr()) || PyLong_Check(obj.ptr())) return attnjit::ScaleArg(nb::cast<float>(obj));
  attnjit::TensorView t = tensor(obj, name);
  if (t.dtype != DType::kFloat32 || t.numel() != 1)
    invalid_argument(name, "a float or a one-element fp32 tensor",
                     std::string(attnjit::dtype_name(t.dtype)) + " " + t.shape_string());
  if (t.data == nullptr) return attnjit::ScaleArg(kShapeOnlyScale);
  return attnjit::ScaleArg(static_cast<const float*>(t.data));
}

int int_arg(nb::handle obj, const char* name) {
  PyObject* index = PyNumber_Index(obj.ptr());  // int, bool, numpy integers; not float or str
  if (!index) {
    PyErr_Clear();
    invalid_argument(name, "an int", std::string("a ") + Py_TYPE(obj.ptr())->tp_name);
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
  Py_DECREF(index);
  if (overflow != 0 || v < INT32_MIN || v > INT32_MAX)
    invalid_argument(name, "an int from -2^31 to 2^31 - 1", nb::cast<std::string>(nb::repr(obj)));
  return static_cast<int>(v);
}

std::optional<int> optional_int_arg(nb::handle obj, const char* name) {
  if (obj.is_none()) return std::nullopt;
  return int_arg(obj, name);
}

DType dtype_from_name(const std::string& n) {
  static const std::pair<const char*, DType> kNames[] = {
      {"fp16", DType::kFloat16},       {"float16", DType::kFloat16},      {"half", DType::kFloat16},
      {"bf16", DType::kBFloat16},      {"bfloat16", DType::kBFloat16},    {"fp32", DType::kFloat32},
      {"float32", DType::kFloat32},    {"float", DType::kFloat32},        {"fp8_e4m3", DType::kFloat8E4M3},
      {"float8_e4m3fn", DType::kFloat8E4M3}, {"e4m3", DType::kFloat8E4M3}, {"fp8_e5m2", DType::kFloat8E5M2},
      {"float8_e5m2", DType::kFloat8E5M2}, {"e5m2", DType::kFloat8E5M2},   {"int8", DType::kInt8},
      {"uint8", DType::kUInt8},        {"uint16", DType::kUInt16},        {"int32", DType::kInt32},
      {"uint32", DType::kUInt32},      {"int64", DType::kInt64}};
  std::string s = n;
  for (const char* prefix : {"torch.", "numpy.", "cupy."})
    if (s.rfind(prefix, 0) == 0) s = s.substr(std::string(prefix).size());
  for (const auto& [name, dtype] : kNames)
    if (s == name) return dtype;
  invalid_argument("dtype", "fp16, bf16, fp32, fp8_e4m3, fp8_e5m2, int8, uint8, uint16, int32, uint32 or int64",
                   "'" + n + "'");
}

attnjit::KvLayout layout_from_name(const std::string& n) {
  if (n == "NHD") return attnjit::KvLayout::kNHD;
  if (n == "HND") return attnjit::KvLayout::kHND;
  invalid_argument("kv_layout", "'NHD' or 'HND'", "'" + n + "'");
}

attnjit::PosEncodingMode pos_encoding_from_name(const std::string& n) {
  if (n == "NONE") return attnjit::PosEncodingMode::kNone;
  if (n == "ROPE_LLAMA") return attnjit::PosEncodingMode::kRopeLlama;
  if (n == "ALIBI") return attnjit::PosEncodingMode::kAlibi;
  invalid_argument("pos_encoding_mode", "'NONE', 'ROPE_LLAMA' or 'ALIBI'", "'" + n + "'");
}

attnjit::Backend backend_from_name(const std::string& n) {
  if (n == "auto") return attnjit::Backend::kAuto;
  if (n == "xqa") return attnjit::Backend::kXqa;
  if (n == "trtllm-gen") return attnjit::Backend::kTrtllmGen;
  invalid_argument("backend", "'auto', 'xqa' or 'trtllm-gen'", "'" + n + "'");
}

void bind_tensor_types(nb::module_& m) {
  // (torch.Tensor, torch._C._to_dlpack), or (None, None) to turn the fast path off.
  m.def("_set_torch_fast_path", [](nb::handle tensor_type, nb::handle to_dlpack) {
    const bool off = tensor_type.is_none() || to_dlpack.is_none();
    if (!off) {
      Py_INCREF(tensor_type.ptr());  // kept for the process's life
      Py_INCREF(to_dlpack.ptr());
    }
    g_torch_tensor = off ? nullptr : reinterpret_cast<PyTypeObject*>(tensor_type.ptr());
    g_torch_to_dlpack = off ? nullptr : to_dlpack.ptr();
  }, nb::arg("tensor_type").none(), nb::arg("to_dlpack").none());
  nb::class_<ShapeOnly>(m, "ShapeOnly", "A tensor's shape and dtype without data, for attnjit.prewarm.")
      .def("__init__",
           [](ShapeOnly* self, const std::vector<int64_t>& shape, const std::string& dtype,
              std::optional<std::vector<int64_t>> strides) {
             if (shape.size() > static_cast<size_t>(attnjit::kMaxRank))
               invalid_argument("shape", "rank <= " + std::to_string(attnjit::kMaxRank),
                                "rank " + std::to_string(shape.size()));
             if (strides && strides->size() != shape.size())
               invalid_argument("strides", "one stride per dimension (" + std::to_string(shape.size()) + ")",
                                std::to_string(strides->size()));
             attnjit::TensorView v;
             v.dtype = dtype_from_name(dtype);
             v.rank = static_cast<int>(shape.size());
             int64_t s = 1;
             for (int d = v.rank - 1; d >= 0; --d) {
               v.shape[d] = shape[d];
               v.stride[d] = strides ? (*strides)[d] : s;
               s *= shape[d];
             }
             new (self) ShapeOnly{v};
           },
           nb::arg("shape"), nb::arg("dtype"), nb::arg("strides") = nb::none())
      .def_prop_ro("shape", [](const ShapeOnly& s) {
        return std::vector<int64_t>(s.view.shape, s.view.shape + s.view.rank);
      })
      .def_prop_ro("strides", [](const ShapeOnly& s) {
        return std::vector<int64_t>(s.view.stride, s.view.stride + s.view.rank);
      })
      .def_prop_ro("dtype", [](const ShapeOnly& s) { return std::string(attnjit::dtype_name(s.view.dtype)); })
      .def("__repr__", [](const ShapeOnly& s) {
        return "ShapeOnly(" + s.view.shape_string() + ", " + attnjit::dtype_name(s.view.dtype) + ")";
      });
}

}  // namespace attnjit_py
