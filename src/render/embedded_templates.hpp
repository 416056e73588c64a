// The templates/**/*.cuh sources, embedded at build time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attnjit::render {

struct EmbeddedFile {
  std::string_view path;  // relative to templates/, e.g. "common/dtype.cuh"
  std::string_view content;
};

// A string literal as a view, its length from its type (no strlen over the text).
template <size_t N>
constexpr std::string_view embedded_literal(const char (&text)[N]) {
  return {text, N - 1};
}

const std::vector<EmbeddedFile>& embedded_templates();

// Their digest, render::template_hash()'s, computed at build time (cmake/template_digest.cpp).
std::string_view embedded_templates_digest();

}  // namespace attnjit::render
