// The templates/**/*.cuh sources, embedded at build time.
#pragma once

#include <string>
#include <vector>

namespace attnjit::render {

struct EmbeddedFile {
  const char* path;     // relative to templates/, e.g. "common/dtype.cuh"
  const char* content;
};

const std::vector<EmbeddedFile>& embedded_templates();

}  // namespace attnjit::render
