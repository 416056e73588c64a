// Thin RAII over the SQLite C API for the store: connection, statement, transaction, errors.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace attnjit::store {

// A failed SQLite call; keeps the extended result code so callers can tell
// corruption (quarantine), read-only (fall back to memory) and busy apart.
class SqliteError : public std::runtime_error {
 public:
  SqliteError(int code, const std::string& message);
  int code() const noexcept { return code_; }
  int primary() const noexcept { return code_ & 0xff; }
  bool corrupt() const noexcept;   // SQLITE_CORRUPT or SQLITE_NOTADB
  bool readonly() const noexcept;  // SQLITE_READONLY, SQLITE_PERM, SQLITE_CANTOPEN
  bool busy() const noexcept;      // SQLITE_BUSY or SQLITE_LOCKED

 private:
  int code_;
};

class Stmt {
 public:
  Stmt(sqlite3* db, std::string_view sql);
  ~Stmt();
  Stmt(Stmt&& other) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& operator=(Stmt&&) = delete;

  // Parameters are 1-based, as in SQLite.
  Stmt& bind_text(int i, std::string_view text);
  Stmt& bind_blob(int i, std::string_view bytes);
  Stmt& bind_int(int i, int64_t value);
  Stmt& bind_double(int i, double value);

  bool step();  // true: a row is ready; false: done
  void run();   // step to completion, ignoring rows
  void reset(); // ready to bind and run again

  // Columns are 0-based.
  int64_t col_int(int i);
  double col_double(int i);
  std::string col_text(int i);
  std::string col_blob(int i);

 private:
  [[noreturn]] void fail(int rc, const char* what);
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

class Db {
 public:
  // Throws SqliteError (the handle is closed on failure).
  static std::unique_ptr<Db> open(const std::string& path, int flags);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  void exec(const std::string& sql);
  Stmt prepare(std::string_view sql) { return Stmt(db_, sql); }
  int64_t query_int(std::string_view sql);       // first column of the first row (0 if none)
  std::string query_text(std::string_view sql);  // first column of the first row ("" if none)
  int64_t changes() const;
  void set_busy_timeout(int ms);
  bool readonly(const char* schema) const;

  // Keep the WAL and -shm files on close: used when our file was renamed away
  // (quarantined by another process), so that closing cannot delete the files
  // of the fresh store that now has that name. (SQLite also skips that when it
  // sees the file moved; this does not depend on it.)
  void persist_wal();
  // Close without checkpointing: keeps fork() quick (the WAL stays for the
  // next connection, which reads it as usual).
  void skip_checkpoint_on_close();
  // Forget the handle without closing it. For a connection inherited across
  // fork(): SQLite forbids using it in the child, and closing it there could
  // drop the parent's locks or unlink its WAL.
  void leak() noexcept { db_ = nullptr; }

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

// BEGIN IMMEDIATE (takes the write lock up front, waiting through the busy
// timeout, so a read never has to be upgraded); rolls back unless committed.
class Txn {
 public:
  explicit Txn(Db& db);
  ~Txn();
  void commit();
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

 private:
  Db& db_;
  bool open_ = true;
};

}  // namespace attnjit::store
