// Parses a SQLite -wal (format: sqlite.org/fileformat2.html#walformat) to find
// frames that recovery will ignore although transactions after them committed.
#include "store/wal_check.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace attnjit::store {

namespace {

constexpr uint32_t kWalMagic = 0x377f0682;  // | 1: checksums over big-endian words
constexpr size_t kWalHeader = 32;
constexpr size_t kFrameHeader = 24;
constexpr int64_t kMaxCheckedBytes = 256LL << 20;  // a larger -wal is not parsed at each open

uint32_t be32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

uint32_t word(const unsigned char* p, bool big_endian) {
  if (big_endian) return be32(p);
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// SQLite's walChecksumBytes: pairs of 32-bit words, seeded by s.
void checksum(const unsigned char* p, size_t n, bool big_endian, uint32_t s[2]) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    s[0] += word(p + i, big_endian) + s[1];
    s[1] += word(p + i + 4, big_endian) + s[0];
  }
}

struct Finding {
  std::string what;
  int64_t offset = -1;
};

bool read_at(int fd, unsigned char* buf, size_t n, int64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, buf + done, n - done, offset + static_cast<off_t>(done));
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

Finding scan(const std::string& wal) {
  Finding f;
  const int fd = ::open(wal.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return f;
  struct stat st {};
  unsigned char hdr[kWalHeader];
  if (fstat(fd, &st) != 0 || st.st_size <= static_cast<off_t>(kWalHeader) ||
      st.st_size > kMaxCheckedBytes || !read_at(fd, hdr, kWalHeader, 0)) {
    ::close(fd);
    return f;
  }
  const uint32_t magic = be32(hdr);
  const bool big_endian = (magic & 1) != 0;
  uint32_t s[2] = {0, 0};
  checksum(hdr, 24, big_endian, s);
  uint32_t page = be32(hdr + 8);
  if (page == 1) page = 65536;
  const bool page_ok = page >= 512 && page <= 65536 && (page & (page - 1)) == 0;
  if ((magic & ~1u) != kWalMagic || !page_ok || s[0] != be32(hdr + 24) || s[1] != be32(hdr + 28)) {
    // Bytes beyond a bad header: whatever they held, SQLite reads none of it.
    if (st.st_size >= static_cast<off_t>(kWalHeader + kFrameHeader + 512)) {
      f.what = "its header is damaged, so SQLite ignores all " + std::to_string(st.st_size) +
               " bytes of it";
      f.offset = 0;
    }
    ::close(fd);
    return f;
  }
  const uint32_t salt1 = be32(hdr + 16), salt2 = be32(hdr + 20);
  const size_t frame_bytes = kFrameHeader + page;
  std::vector<unsigned char> frame(frame_bytes);
  uint32_t prev[2] = {be32(hdr + 24), be32(hdr + 28)};  // the previous frame's stored checksum
  int64_t first_bad = -1, bad_index = -1;
  int64_t dropped_commits = 0;
  for (int64_t i = 0;; ++i) {
    const int64_t offset = static_cast<int64_t>(kWalHeader) + i * static_cast<int64_t>(frame_bytes);
    if (offset + static_cast<int64_t>(frame_bytes) > st.st_size) break;
    if (!read_at(fd, frame.data(), frame_bytes, offset)) break;
    // Other salts: a frame of an earlier generation of the -wal, the end of this one.
    if (be32(frame.data() + 8) != salt1 || be32(frame.data() + 12) != salt2) break;
    uint32_t c[2] = {prev[0], prev[1]};
    checksum(frame.data(), 8, big_endian, c);
    checksum(frame.data() + kFrameHeader, page, big_endian, c);
    const bool ok = c[0] == be32(frame.data() + 16) && c[1] == be32(frame.data() + 20);
    const bool commit = be32(frame.data() + 4) != 0;
    if (first_bad < 0 && !ok) {
      first_bad = offset;
      bad_index = i;
    }
    // Only commits after the bad frame: a bad commit frame itself may be one that a
    // kill -9 cut between its header and its page (two writes), never committed.
    if (first_bad >= 0 && offset != first_bad && commit && ok) ++dropped_commits;
    prev[0] = be32(frame.data() + 16);
    prev[1] = be32(frame.data() + 20);
  }
  ::close(fd);
  if (first_bad >= 0 && dropped_commits > 0) {
    f.what = "frame " + std::to_string(bad_index) + " (byte " + std::to_string(first_bad) +
             ") fails its checksum, so SQLite ignores it and every frame after it, dropping " +
             std::to_string(dropped_commits) + " committed transaction(s)";
    f.offset = first_bad;
  }
  return f;
}

}  // namespace

std::string wal_damage(const std::string& db_path) {
  const std::string wal = db_path + "-wal";
  Finding first = scan(wal);
  if (first.offset < 0) return "";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Finding again = scan(wal);
  if (again.offset != first.offset) return "";
  return wal + " is damaged: " + again.what;
}

}  // namespace attnjit::store
