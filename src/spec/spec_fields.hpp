// The KernelSpec field table: one row per field (or field group), and the one
// place that knows how each is compared, hashed, written to JSON and named.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "spec/kernel_spec.hpp"

namespace attnjit::spec {

struct Field {
  const char* key;                                   // JSON key; also what errors name
  uint64_t (*value)(const KernelSpec&);              // equality and hash (no allocation)
  void (*write_json)(const KernelSpec&, nlohmann::json&);
  void (*read_json)(KernelSpec&, const nlohmann::json&);  // throws Error naming the key
  std::string (*token)(const KernelSpec&);           // name token(s), '.'-joined; "" writes none
  bool (*read_token)(KernelSpec&, const std::string&);  // true: the token is this field's
  bool required;     // the name always has this token
  bool repeats;      // several tokens in a row (the feature flags)
  const char* expect;  // what a parse error says was expected here
};

// The table, in name order.
const Field* fields_begin();
const Field* fields_end();

// "e4m3", "e5m2", else dtype_name(): the dtype spelling in names.
std::string short_dtype_name(DType d);

}  // namespace attnjit::spec
