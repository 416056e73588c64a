// Op bindings register themselves here, one file per op in src/ops/, so that adding
// an op's binding touches no shared file.
#pragma once

#include <nanobind/nanobind.h>

namespace attnjit_py {

using BindFn = void (*)(nanobind::module_&);

// Called at static-initialization time by ATTNJIT_PY_OP; the module runs them all.
bool add_binding(BindFn fn);
void bind_all(nanobind::module_& m);

}  // namespace attnjit_py

// In an op's file: ATTNJIT_PY_OP(bind_xqa) after `void bind_xqa(nanobind::module_& m)`.
#define ATTNJIT_PY_OP(fn) \
  static const bool attnjit_py_registered_##fn = ::attnjit_py::add_binding(&fn)
