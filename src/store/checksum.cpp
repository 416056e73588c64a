#include "store/checksum.hpp"

#define XXH_INLINE_ALL  // header-only: no libxxhash.so where the library runs
#include <xxhash.h>

#include <cstdint>
#include <memory>

#include "store/cubin_store.hpp"
#include "util/hash.hpp"

namespace attnjit::store {

namespace {

// Bumped whenever the covered fields change, so old checksums never match.
constexpr std::string_view kChecksumTag = "attnjit.row.v3";

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

void update_field(XXH3_state_t* state, std::string_view bytes) {
  unsigned char len[8];
  uint64_t n = bytes.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  XXH3_128bits_update(state, len, sizeof(len));
  XXH3_128bits_update(state, bytes.data(), bytes.size());
}

}  // namespace

std::string ptx_checksum(std::string_view ptx) { return util::xxh128_hex(ptx); }

std::string row_checksum(const Entry& e, std::string_view ptx_digest) {
  // Streaming, so that a large cubin is hashed in place rather than copied.
  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  XXH3_128bits_reset(state.get());
  for (std::string_view field : {kChecksumTag, std::string_view(e.key), std::string_view(e.name),
                                 std::string_view(e.arch), std::string_view(e.meta_json),
                                 std::string_view(e.cubin), ptx_digest}) {
    update_field(state.get(), field);
  }
  const XXH128_hash_t h = XXH3_128bits_digest(state.get());
  return util::hex128(h.high64, h.low64);
}

}  // namespace attnjit::store
