// Finds damage in a store's -wal that makes SQLite silently drop committed entries.
#pragma once

#include <string>

namespace attnjit::store {

// Reads "<db_path>-wal" the way SQLite's recovery does and returns why committed
// transactions in it will be ignored, or "" when none will be (no -wal, an empty
// one, or one whose only bad frames are an uncommitted tail).
//
// SQLite keeps the frames of a -wal up to the first one whose salts or
// checksum (cumulative, seeded by the previous frame's) fail, and ignores the
// rest without a word: a flipped byte in an early frame drops every entry
// committed after it. The sound sign of that: a frame with this -wal's salts
// (so written in this generation, not a leftover of an earlier one) whose
// checksum fails, followed by a commit frame that checks out against its own
// predecessor. A crash (kill -9) leaves at most an uncommitted tail, whose last
// frame may be cut between its header and its page (SQLite writes them apart), so
// a bad frame with no good commit after it is not damage: damage to the very last
// commit frame looks the same and is not reported. A header that fails its own
// checksum in front of frames makes SQLite ignore the whole file.
//
// The -wal may be in use by another process: a frame caught half written looks
// damaged, so a finding counts only when a second read, a moment later, finds the
// same first bad frame (a frame being written is complete by then).
std::string wal_damage(const std::string& db_path);

}  // namespace attnjit::store
