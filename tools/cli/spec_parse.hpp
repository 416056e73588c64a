// Turning what an operator types into a KernelSpec: a readable name
// ("xqa.bf16.kve4m3.hd128.g8.p32.nhd.sm90a") or a (partial) spec JSON.
#pragma once

#include <optional>
#include <string>

#include "spec/kernel_spec.hpp"

namespace attnjit::cli {

// In all three, a given `arch` applies when the text names none (a different
// one in the text is an Error), and `fallback` when neither does. Input is
// bounded (util/bounded_input.hpp): names of 200 characters, JSON of 1 MiB.

// Parses the format of KernelSpec::name(); the arch suffix may be left out.
// Throws Error(kInvalidArgument) naming the token it could not read. Tokens
// must come in KernelSpec::name()'s order, so a name means exactly one spec.
spec::KernelSpec spec_from_name(const std::string& name, const std::optional<spec::Arch>& arch = {},
                                const spec::Arch& fallback = spec::Arch::parse("sm_90a"));

// A spec JSON object; absent fields take KernelSpec's defaults (kv_dtype and
// out_dtype default to q_dtype).
spec::KernelSpec spec_from_json_text(const std::string& text, const std::optional<spec::Arch>& arch = {},
                                     const spec::Arch& fallback = spec::Arch::parse("sm_90a"));

// Either of the above: text starting with '{' is JSON, a path ending in .json
// is read as JSON, anything else is a name.
spec::KernelSpec spec_from_text(const std::string& text, const std::optional<spec::Arch>& arch = {},
                                const spec::Arch& fallback = spec::Arch::parse("sm_90a"));

}  // namespace attnjit::cli
