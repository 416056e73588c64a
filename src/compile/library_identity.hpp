// A shared library's identity taken from its content, never from its file name,
// path or host: the ELF GNU build-id, else a hash of the whole file.
#pragma once

#include <string>

namespace attnjit::compile {

// "build-id <hex>" from the ELF file's NT_GNU_BUILD_ID note, else "xxh128 <hex>"
// of its bytes, else "" when the file cannot be read. Two copies or links of one
// library give the same identity wherever they sit.
std::string library_identity(const std::string& path);

// The ELF file's GNU build-id as hex, or "" when it has none (or is not ELF).
std::string elf_build_id(const std::string& path);

}  // namespace attnjit::compile
