// Spec -> a tiny translation unit (aliases, constexprs, one extern "C" entry)
// that includes the kernel templates, plus the template sources NVRTC needs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "spec/kernel_spec.hpp"

namespace attnjit::render {

struct TemplateFile {
  std::string path;     // include name, relative to templates/
  std::string content;
};

// Embedded templates, or the files under $ATTNJIT_TEMPLATE_DIR when it is set.
const std::vector<TemplateFile>& template_files();
// XXH3-128 over every template path and content: part of every cache key.
const std::string& template_hash();

// A toolkit header folder NVRTC reads from disk (CCCL): its path is not part of the key (it
// differs between machines), the hash of its headers' content is.
struct IncludeDir {
  std::string path;
  std::string content_hash;
};

struct RenderedUnit {
  std::string source;
  // Everything the source can include, so that compile() needs nothing else: the templates, handed
  // to NVRTC by name (all of them: a superset of what it includes), and toolkit folders.
  std::vector<TemplateFile> headers;
  std::vector<IncludeDir> include_dirs;
  std::string entry;        // the extern "C" kernel symbol
  std::string smem_symbol;  // __constant__ int holding the dynamic smem bytes
  int expected_smem_bytes = 0;  // the host's figure; checked against smem_symbol at load
  int tile_tokens = 16;         // KV tokens per warp tile: split boundaries align to it
};

// The key's hash of what a unit includes: its headers (path, content) and each include dir's
// content hash. Equals template_hash() for a unit that carries the templates and no include dir.
std::string headers_hash(const RenderedUnit& unit);

// Throws Error(kUnsupported) when the spec names a variant the templates lack.
RenderedUnit render(const spec::KernelSpec& spec);

// Tuning derived from the spec (also used by the host to size launches).
struct DecodeTiling {
  int warps = 4;
  int stages = 3;
  int smem_bytes = 0;  // dynamic shared memory per CTA (mirrors DecodeTraits::kSmemBytes)
  int smem_limit = 0;  // the arch's opt-in maximum per block
  int tile = 16;       // tokens per warp tile
  bool lazy_rescale = false;
};
int max_smem_per_block(const spec::Arch& arch);
DecodeTiling decode_tiling(const spec::KernelSpec& spec);

}  // namespace attnjit::render
