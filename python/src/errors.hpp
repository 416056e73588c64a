// attnjit::Error -> the Python exception classes of attnjit/_errors.py, with .kind.
#pragma once

#include <string>

#include <nanobind/nanobind.h>

namespace attnjit_py {

// Installs the translator; the classes come from attnjit._errors (set at import).
void register_errors(nanobind::module_& m);

// An argument error raised by the binding itself (device, dtype mapping), in the
// same words as the ops' own: "argument 'q': expected ..., got ...".
[[noreturn]] void invalid_argument(const std::string& arg, const std::string& expected, const std::string& given);

}  // namespace attnjit_py
