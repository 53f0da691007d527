#pragma once
#include <functional>
#include <string>

namespace strata {

// Runs fn while holding an exclusive lock on lock_path (flock), so that local
// ranks sharing a cache build each file once while the others wait.
void with_file_lock(const std::string& lock_path, const std::function<void()>& fn);
// Writes content to path through a temporary file, fsync and rename.
void write_file_atomic(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);
// FNV-1a 64-bit, as 16 hex digits: cache keys for corpora and tokenizers.
std::string content_hash(const std::string& data);

}  // namespace strata
