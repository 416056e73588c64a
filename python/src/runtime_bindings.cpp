// attnjit._ext: the runtime's statistics (Runtime::global().stats()).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "attnjit/runtime.hpp"

namespace nb = nanobind;

namespace attnjit_py {

void bind_runtime(nb::module_& m) {
  m.def("cache_stats", [] {
    attnjit::RuntimeStats s;
    {
      nb::gil_scoped_release release;  // the first call opens the store
      s = attnjit::Runtime::global().stats();
    }
    nb::dict d;
    d["lookups"] = s.lookups;
    d["compiles"] = s.compiles;
    d["store_hits"] = s.store_hits;
    d["module_loads"] = s.module_loads;
    d["compile_ms"] = s.compile_ms;
    d["store_load_ms"] = s.store_load_ms;
    d["cache_path"] = s.cache_path;
    return d;
  });
}

}  // namespace attnjit_py
