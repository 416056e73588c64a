#include "errors.hpp"

#include <nanobind/stl/string.h>

#include "attnjit/error.hpp"

namespace nb = nanobind;

namespace attnjit_py {

namespace {
// attnjit._errors.raise_error(kind, message, extra): builds and returns the exception.
nb::object& error_factory() {
  static nb::object* factory = new nb::object();  // leaked: outlives interpreter teardown order
  return *factory;
}

const char* kind_name(attnjit::ErrorCode code) {
  switch (code) {
    case attnjit::ErrorCode::kInvalidArgument: return "invalid_argument";
    case attnjit::ErrorCode::kUnsupported: return "unsupported";
    case attnjit::ErrorCode::kCompileFailed: return "compile_failed";
    case attnjit::ErrorCode::kDriver: return "driver";
    case attnjit::ErrorCode::kNoDevice: return "no_device";
    case attnjit::ErrorCode::kStore: return "store";
    case attnjit::ErrorCode::kNotPrewarmed: return "not_prewarmed";
    case attnjit::ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

void raise(const char* kind, const std::string& message, nb::dict extra) {
  if (!error_factory().is_valid()) {  // the package was not imported through attnjit/__init__.py
    PyErr_SetString(PyExc_RuntimeError, message.c_str());
    return;
  }
  nb::object exc = error_factory()(kind, message, extra);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

class InvalidArgument : public std::exception {
 public:
  explicit InvalidArgument(std::string m) : message_(std::move(m)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};
}  // namespace

void invalid_argument(const std::string& arg, const std::string& expected, const std::string& given) {
  throw InvalidArgument("argument '" + arg + "': expected " + expected + ", got " + given);
}

void register_errors(nb::module_& m) {
  m.def("_set_error_factory", [](nb::object f) { error_factory() = std::move(f); });
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const attnjit::CompileError& e) {
      nb::dict extra;
      extra["log"] = e.log();
      extra["options"] = e.options();
      extra["source"] = e.source();
      raise(kind_name(e.code()), e.what(), extra);
    } catch (const attnjit::Error& e) {
      raise(kind_name(e.code()), e.what(), nb::dict());
    } catch (const InvalidArgument& e) {
      raise("invalid_argument", e.what(), nb::dict());
    }
  });
}

}  // namespace attnjit_py
