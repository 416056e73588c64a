#include "compile/library_identity.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "util/hash.hpp"

namespace attnjit::compile {

namespace {

constexpr uint64_t kMaxNoteBytes = 1 << 20;

bool read_at(std::ifstream& f, uint64_t offset, void* out, size_t n) {
  f.clear();
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
  return static_cast<size_t>(f.gcount()) == n;
}

std::string hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Walks the notes of one PT_NOTE segment for NT_GNU_BUILD_ID.
std::string build_id_in_notes(const std::vector<unsigned char>& notes) {
  size_t at = 0;
  auto align4 = [](size_t v) { return (v + 3) & ~size_t{3}; };
  while (at + sizeof(Elf64_Nhdr) <= notes.size()) {
    Elf64_Nhdr nh;
    std::memcpy(&nh, notes.data() + at, sizeof(nh));
    const size_t name_at = at + sizeof(nh);
    const size_t desc_at = name_at + align4(nh.n_namesz);
    const size_t next = desc_at + align4(nh.n_descsz);
    if (desc_at > notes.size() || nh.n_descsz > notes.size() - desc_at) break;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
        std::memcmp(notes.data() + name_at, "GNU", 4) == 0 && nh.n_descsz > 0) {
      return hex(notes.data() + desc_at, nh.n_descsz);
    }
    at = next;
  }
  return "";
}

}  // namespace

std::string elf_build_id(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  Elf64_Ehdr eh;
  if (!read_at(f, 0, &eh, sizeof(eh)) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return "";
  }
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (!read_at(f, eh.e_phoff + uint64_t{i} * sizeof(ph), &ph, sizeof(ph))) return "";
    if (ph.p_type != PT_NOTE || ph.p_filesz == 0 || ph.p_filesz > kMaxNoteBytes) continue;
    std::vector<unsigned char> notes(ph.p_filesz);
    if (!read_at(f, ph.p_offset, notes.data(), notes.size())) continue;
    std::string id = build_id_in_notes(notes);
    if (!id.empty()) return id;
  }
  return "";
}

std::string library_identity(const std::string& path) {
  if (std::string id = elf_build_id(path); !id.empty()) return "build-id " + id;
  // No build-id: hash the bytes (slow for a 100 MB library, but only once per process).
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return "xxh128 " + util::xxh128_hex(bytes);
}

}  // namespace attnjit::compile
