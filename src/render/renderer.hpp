// Spec -> a tiny translation unit (through the spec's registered family), plus
// the template sources NVRTC needs and their hash.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "render/family.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::render {

// Embedded templates, or the files under $ATTNJIT_TEMPLATE_DIR when it is set: the set
// render() gives every unit (template_set), and its files.
const std::shared_ptr<const std::vector<TemplateFile>>& template_set();
const std::vector<TemplateFile>& template_files();
// True when $ATTNJIT_TEMPLATE_DIR replaces the embedded templates (read once per process).
bool templates_overridden();
// XXH3-128 over every template path and content (util::KeyEncoder, a field per file): part
// of every cache key. The embedded set's was taken at build time.
const std::string& template_hash();

// Spec -> its family's translation unit, after the family's can_implement (the
// one place that decides "can serve"). Throws Error(kUnsupported) with its reason.
RenderedUnit render(const spec::KernelSpec& spec);

// The key's hash of what a unit includes: its headers' digest (as template_hash(), which it
// is for a unit that carries the process's templates) and, if any, each include dir's content
// hash. Equals that digest for a unit without include dirs.
std::string headers_hash(const RenderedUnit& unit);

// The arch's opt-in maximum of dynamic shared memory per block.
int max_smem_per_block(const spec::Arch& arch);

}  // namespace attnjit::render
