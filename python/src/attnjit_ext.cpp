// The attnjit._ext module: errors, tensors, the runtime and every registered op.
#include <nanobind/nanobind.h>

#include <vector>

#include "attnjit/version.hpp"
#include "errors.hpp"
#include "registry.hpp"
#include "tensor_arg.hpp"

namespace nb = nanobind;

namespace attnjit_py {
void bind_runtime(nb::module_& m);

namespace {
std::vector<BindFn>& bindings() {
  static std::vector<BindFn> fns;
  return fns;
}
}  // namespace

bool add_binding(BindFn fn) {
  bindings().push_back(fn);
  return true;
}

void bind_all(nb::module_& m) {
  for (BindFn fn : bindings()) fn(m);
}
}  // namespace attnjit_py

NB_MODULE(attnjit_ext, m) {
  m.doc() = "attnjit's C++ binding; use the attnjit package, not this module.";
  m.attr("version") = attnjit::version();
  attnjit_py::register_errors(m);
  attnjit_py::bind_tensor_types(m);
  attnjit_py::bind_runtime(m);
  attnjit_py::bind_all(m);
}
