// Where the store lives on disk: the cache folder, private permissions, temp files, quarantine.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "store/cubin_store.hpp"

namespace attnjit::store {

inline constexpr const char* kDbFileName = "cubins.sqlite3";

struct DirState {
  bool exists = false;    // the folder exists (or was created) and is a directory
  bool writable = false;  // this process can create files in it
  std::string problem;    // why not, for the store's note
};

// mkdir -p with 0700 (the last component is chmod'ed, so the umask does not
// matter). Throws Error(kStore) when the folder exists but others can write it
// or it belongs to another user (root excepted): a cubin is code that will run.
DirState prepare_cache_dir(const std::string& dir);

// Why the store must not open `file` (a database file or one of its -wal/-shm/
// -journal/.lock side files), or "" when it may (or does not exist). A store file
// must be a regular file, not a symlink (SQLite would follow it and create its
// side files beside the target), owned by this user (or root), and writable by no
// one else: whoever can write it can recompute the checksums, and a cubin is code
// that will run.
std::string untrusted_file_reason(const std::string& file);
// The first untrusted_file_reason() among db_path and its side files.
std::string untrusted_db_files_reason(const std::string& db_path);

// chmod 0600 on the file if it exists, is ours and is not 0600 already.
void make_private(const std::string& file);
// make_private on the db and its -wal, -shm and -journal.
void make_db_files_private(const std::string& db_path);

// A fresh, private (0600), empty file next to `path` that no one else uses:
// "<path>.tmp-<pid>-<n>". Returns "" and sets *error when it cannot be made.
std::string create_temp_file(const std::string& path, std::string* error);
// Remove a temp file and its SQLite side files.
void remove_db_files(const std::string& path);
// Remove "<base>.tmp-<pid>-*" files left by processes that no longer exist.
void sweep_stale_temps(const std::string& dir, const std::string& base);

// Move tmp to final without ever replacing an existing final (hard link, or a
// rename when the file system has no links). False when final already existed.
bool publish_file(const std::string& tmp, const std::string& final_path);

// Rename the db to "<name>.corrupt-<unix time>-<pid>" and its -wal/-shm to
// that name plus "-wal"/"-shm", side files first so that no opener can pair a
// fresh db with an old WAL.
// Returns the new name of the db, or "" with *error set.
std::string quarantine_db_files(const std::string& db_path, std::string* error);

// Deletes quarantined sets of db_path beyond the `keep` newest (each set is the
// db and its -wal/-shm/-journal). Returns how many sets it removed.
int prune_quarantine(const std::string& db_path, int keep);

// An flock(2) on "<db>.lock": shared while opening, exclusive while
// quarantining, so that no process opens a half-renamed set of files.
// Waits at most timeout_ms (a holder may be stopped or hung); then
// timed_out() is true and nothing is held.
class DirLock {
 public:
  DirLock(const std::string& db_path, bool exclusive, int timeout_ms);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool timed_out() const { return timed_out_; }
  const std::string& lock_path() const { return lock_path_; }

 private:
  std::string lock_path_;
  int fd_ = -1;
  bool timed_out_ = false;
};

// One process compiling one key: an open-file-description lock (fcntl F_OFD_SETLK) on a
// byte of "<db>.lock" picked by the key's first hex digits (flock, DirLock's, is apart from
// fcntl locks on Linux). Per open file, so this process's threads that compile other keys
// hold other bytes; two keys on one byte only wait for each other. Waits at most timeout_ms,
// then timed_out() and the caller compiles anyway.
class KeyLock final : public CompileClaim {
 public:
  KeyLock(const std::string& db_path, const std::string& key, int timeout_ms);
  ~KeyLock() override;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  bool held() const { return fd_ >= 0; }
  bool timed_out() const { return timed_out_; }

 private:
  int fd_ = -1;
  bool timed_out_ = false;
};

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
  bool operator!=(const FileId& o) const { return !(*this == o); }
};
// False when the file does not exist.
bool file_id(const std::string& path, FileId* id, int64_t* size = nullptr);
bool file_exists(const std::string& path);

// `path` made absolute against the current folder, with repeated slashes and
// "." components removed and no trailing slash (".." is kept: a symlink may
// stand before it). Returns path unchanged if the current folder is unknown.
std::string absolute_path(const std::string& path);

// A "file:///abs/path" URI for sqlite3_open_v2/ATTACH ('%', '?', '#' and
// control characters escaped), with `query` (e.g. "mode=ro") appended.
std::string sqlite_uri(const std::string& path, const std::string& query);

int64_t now_us();
std::string errno_text(int err);

}  // namespace attnjit::store
