// The family registry: generated from src/spec/families.def, so registering a
// family is its one line there; each family's ops namespace defines family().
#include "render/family.hpp"

namespace attnjit {

#define ATTNJIT_FAMILY(id, token, ns) \
  namespace ops::ns {                 \
  const render::Family& family();     \
  }
#include "spec/families.def"
#undef ATTNJIT_FAMILY

namespace render {

namespace {
const Family* const* table() {
  static const Family* const kTable[] = {
#define ATTNJIT_FAMILY(id, token, ns) &ops::ns::family(),
#include "spec/families.def"
#undef ATTNJIT_FAMILY
  };
  return kTable;
}
constexpr size_t kCount = 0
#define ATTNJIT_FAMILY(id, token, ns) +1
#include "spec/families.def"
#undef ATTNJIT_FAMILY
    ;
}  // namespace

const Family* const* families_begin() { return table(); }
const Family* const* families_end() { return table() + kCount; }

const Family* find_family(spec::OpFamily id) {
  for (auto it = families_begin(); it != families_end(); ++it)
    if ((*it)->id == id) return *it;
  return nullptr;
}

}  // namespace render
}  // namespace attnjit
