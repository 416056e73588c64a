#include "store/store_location.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "store/cubin_store.hpp"

namespace attnjit::store {

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

bool owner_ok(uid_t uid) { return uid == geteuid() || uid == 0; }

// mkdir -p; intermediate folders get 0700 too (XDG asks that of ~/.cache).
int make_dirs(const std::string& dir) {
  if (dir.empty()) return ENOENT;
  if (mkdir(dir.c_str(), 0700) == 0) return 0;
  if (errno == EEXIST) return 0;
  if (errno != ENOENT) return errno;
  auto slash = dir.find_last_of('/', dir.size() > 1 ? dir.size() - 2 : std::string::npos);
  if (slash == std::string::npos || slash == 0) return ENOENT;
  if (int err = make_dirs(dir.substr(0, slash))) return err;
  if (mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return 0;
  return errno;
}

}  // namespace

std::string errno_text(int err) { return std::strerror(err); }

std::string resolve_cache_dir() {
  std::string dir = env_or_empty("ATTNJIT_CACHE_DIR");
  if (!dir.empty()) return dir;
  // XDG: a relative $XDG_CACHE_HOME is invalid and must be ignored.
  std::string xdg = env_or_empty("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg[0] == '/') return xdg + "/attnjit";
  std::string home = env_or_empty("HOME");
  if (home.empty()) {
    if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) home = pw->pw_dir;
  }
  if (home.empty()) return "";
  return home + "/.cache/attnjit";
}

DirState prepare_cache_dir(const std::string& dir) {
  DirState state;
  struct stat st {};
  bool created = false;
  if (stat(dir.c_str(), &st) != 0) {
    if (int err = make_dirs(dir)) {
      state.problem = "cannot create cache folder " + dir + ": " + errno_text(err);
      return state;
    }
    created = true;
    if (stat(dir.c_str(), &st) != 0) {
      state.problem = "cannot stat cache folder " + dir + ": " + errno_text(errno);
      return state;
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    state.problem = "cache folder " + dir + " is not a directory";
    return state;
  }
  if (created && (st.st_mode & 07777) != 0700 && owner_ok(st.st_uid)) {
    // mkdir applied the umask; set exactly 0700 whatever it was.
    if (chmod(dir.c_str(), 0700) == 0) st.st_mode = (st.st_mode & ~07777) | 0700;
  }
  if (!owner_ok(st.st_uid)) {
    throw Error(ErrorCode::kStore,
                "refusing cache folder " + dir + ": it is owned by uid " +
                    std::to_string(st.st_uid) + ", not by this user (uid " +
                    std::to_string(geteuid()) + "); a cubin is code that will run. Use a folder " +
                    "you own, e.g. set ATTNJIT_CACHE_DIR");
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    throw Error(ErrorCode::kStore,
                "refusing cache folder " + dir + ": mode " + mode_text(st.st_mode) +
                    " lets group or others write it, and a cubin is code that will run. Fix: "
                    "chmod 700 " + dir);
  }
  state.exists = true;
  state.writable = access(dir.c_str(), W_OK | X_OK) == 0;
  if (!state.writable) state.problem = "cache folder " + dir + " is not writable: " + errno_text(errno);
  return state;
}

std::string untrusted_file_reason(const std::string& file) {
  struct stat st {};
  if (lstat(file.c_str(), &st) != 0) return "";  // absent: SQLite creates it 0600 beside ours
  if (S_ISLNK(st.st_mode)) return file + " is a symbolic link (store files must be regular files)";
  if (!S_ISREG(st.st_mode)) return file + " is not a regular file";
  if (!owner_ok(st.st_uid)) {
    return file + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
           std::to_string(geteuid()) + ")";
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return file + " has mode " + mode_text(st.st_mode) + ", writable by group or others";
  }
  return "";
}

std::string untrusted_db_files_reason(const std::string& db_path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal", ".lock"}) {
    std::string why = untrusted_file_reason(db_path + suffix);
    if (!why.empty()) return why;
  }
  return "";
}

void make_private(const std::string& file) {
  struct stat st {};
  if (lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  if (st.st_uid != geteuid() || (st.st_mode & 07777) == 0600) return;
  chmod(file.c_str(), 0600);
}

void make_db_files_private(const std::string& db_path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) make_private(db_path + suffix);
}

std::string create_temp_file(const std::string& path, std::string* error) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string tmp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
      fchmod(fd, 0600);  // the umask may have removed bits; make it exactly 0600
      ::close(fd);
      return tmp;
    }
    if (errno != EEXIST) {
      if (error) *error = "cannot create " + tmp + ": " + errno_text(errno);
      return "";
    }
  }
  if (error) *error = "cannot create a temp file next to " + path;
  return "";
}

void remove_db_files(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) unlink((path + suffix).c_str());
}

void sweep_stale_temps(const std::string& dir, const std::string& base) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = base + ".tmp-";
  while (dirent* ent = readdir(d)) {
    std::string name = ent->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || pid == getpid()) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still alive
    unlink((dir + "/" + name).c_str());
  }
  closedir(d);
}

bool publish_file(const std::string& tmp, const std::string& final_path) {
  if (link(tmp.c_str(), final_path.c_str()) == 0) {
    unlink(tmp.c_str());
    return true;
  }
  int err = errno;
  if (err == EEXIST) {
    unlink(tmp.c_str());
    return false;
  }
  // No hard links here (some FUSE/vfat mounts): rename unless someone beat us.
  if (file_exists(final_path)) {
    unlink(tmp.c_str());
    return false;
  }
  if (rename(tmp.c_str(), final_path.c_str()) == 0) return true;
  unlink(tmp.c_str());
  return false;
}

std::string quarantine_db_files(const std::string& db_path, std::string* error) {
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  std::string tag = ".corrupt-" + std::to_string(secs) + "-" + std::to_string(getpid());
  std::string to = db_path + tag;
  // "<to>-wal" rather than "<db>-wal<tag>": the quarantined set stays a db that
  // sqlite3 (and verify's salvage) can open with its WAL.
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    std::string from = db_path + suffix;
    if (file_exists(from)) rename(from.c_str(), (to + suffix).c_str());
  }
  if (rename(db_path.c_str(), to.c_str()) != 0) {
    if (error) *error = "cannot rename " + db_path + " to " + to + ": " + errno_text(errno);
    return "";
  }
  return to;
}

int prune_quarantine(const std::string& db_path, int keep) {
  namespace fs = std::filesystem;
  const fs::path db(db_path);
  const std::string prefix = db.filename().string() + ".corrupt-";
  std::vector<std::pair<long long, fs::path>> sets;  // (unix time from the name, path)
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(db.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // "<time>-<pid>[-wal|-shm|-journal]"
    if (rest.find("-wal") != std::string::npos || rest.find("-shm") != std::string::npos ||
        rest.find("-journal") != std::string::npos)
      continue;
    sets.emplace_back(std::atoll(rest.c_str()), e.path());
  }
  if (static_cast<int>(sets.size()) <= keep) return 0;
  std::sort(sets.begin(), sets.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  int removed = 0;
  for (size_t i = static_cast<size_t>(std::max(keep, 0)); i < sets.size(); ++i) {
    const std::string base = sets[i].second.string();
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(base + suffix, ec);
    ++removed;
  }
  return removed;
}

namespace {

enum class LockWait { kLocked, kTimedOut, kFailed };

// Calls try_lock (non-blocking) until it succeeds, fails with an errno that is_busy(errno)
// refuses (EINTR retries), or timeout_ms pass, backing off 1 -> 50 ms. *waited: it was busy
// at least once.
template <class TryLock, class IsBusy>
LockWait wait_for_lock(TryLock try_lock, IsBusy is_busy, int timeout_ms, bool* waited) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::milliseconds(1);
  while (!try_lock()) {
    if (errno == EINTR) continue;
    if (!is_busy(errno)) return LockWait::kFailed;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return LockWait::kTimedOut;
    if (waited) *waited = true;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return LockWait::kLocked;
}

}  // namespace

DirLock::DirLock(const std::string& db_path, bool exclusive, int timeout_ms)
    : lock_path_(db_path + ".lock") {
  fd_ = ::open(lock_path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) return;  // best effort: without it only a narrow race remains
  fchmod(fd_, 0600);
  // Non-blocking with retries: a stopped holder must not hang every opener.
  const LockWait r = wait_for_lock([&] { return flock(fd_, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0; },
                                   [](int e) { return e == EWOULDBLOCK; }, timeout_ms, nullptr);
  if (r == LockWait::kLocked) return;
  timed_out_ = r == LockWait::kTimedOut;  // another errno (e.g. ENOLCK): go on unlocked
  ::close(fd_);
  fd_ = -1;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

KeyLock::KeyLock(const std::string& db_path, const std::string& key, int timeout_ms) {
  fd_ = ::open((db_path + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) return;
  // Bytes 1 .. 2^40 (byte 0 is left alone); the key is hex, so its first 10 digits spread them.
  uint64_t slot = 0;
  std::from_chars(key.data(), key.data() + std::min<size_t>(key.size(), 10), slot, 16);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(slot + 1);
  fl.l_len = 1;
  // A held fcntl lock answers EAGAIN or EACCES.
  const LockWait r = wait_for_lock([&] { return fcntl(fd_, F_OFD_SETLK, &fl) == 0; },
                                   [](int e) { return e == EAGAIN || e == EACCES; }, timeout_ms, &waited_);
  if (r == LockWait::kLocked) return;
  timed_out_ = r == LockWait::kTimedOut;  // another errno (EINVAL, ENOLCK): no lock here
  ::close(fd_);
  fd_ = -1;
}

KeyLock::~KeyLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the description releases its lock
}

bool file_id(const std::string& path, FileId* id, int64_t* size) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return false;
  if (id) *id = FileId{st.st_dev, st.st_ino};
  if (size) *size = st.st_size;
  return true;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

std::string absolute_path(const std::string& path) {
  std::string full = path;
  if (full.empty() || full[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd))) return path;
    full = std::string(cwd) + "/" + full;
  }
  std::string out;
  size_t i = 0;
  while (i < full.size()) {
    size_t end = full.find('/', i);
    if (end == std::string::npos) end = full.size();
    const std::string part = full.substr(i, end - i);
    if (!part.empty() && part != ".") out += "/" + part;
    i = end + 1;
  }
  return out.empty() ? "/" : out;
}

std::string sqlite_uri(const std::string& path, const std::string& query) {
  // "file:" + "//" + "/abs": an empty authority, so "//host/..." can never be
  // read as a host name.
  std::string uri = "file://";
  for (unsigned char c : absolute_path(path)) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c == 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      uri += buf;
    } else {
      uri += static_cast<char>(c);
    }
  }
  if (!query.empty()) uri += "?" + query;
  return uri;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace attnjit::store
