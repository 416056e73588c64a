// Toolkit header folders a rendered unit may include (CCCL's libcu++: cuda/ptx, cuda/barrier),
// found once per process and hashed by content, so that the cache key follows the headers.
#pragma once

#include <string>
#include <vector>

#include "render/renderer.hpp"

namespace attnjit::compile {

// CCCL's include folder (the one holding cuda/ptx), first found of: $ATTNJIT_CCCL_DIR; the
// toolkit that holds the loaded libnvrtc (<lib>/../include/cccl); the toolkit attnjit was built
// against; /usr/local/cuda/include/cccl. content_hash is XXH3-128 over every file
// under its cuda/, nv/, cub/ and thrust/ (all that -I<it> makes reachable), taken once per process.
// Throws Error(kUnsupported) naming the folders tried when none has cuda/ptx.
const render::IncludeDir& cccl_include_dir();

// Adds CCCL to a unit (for generators whose templates include <cuda/ptx> or <cuda/barrier>).
void add_cccl(render::RenderedUnit& unit);

// The same content hash for any folder: relative path and content of each regular file under
// `subdirs`, in sorted order. Exposed for tests.
std::string hash_header_tree(const std::string& root, const std::vector<std::string>& subdirs);

}  // namespace attnjit::compile
