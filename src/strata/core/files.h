#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace strata {

// Runs fn while holding an exclusive lock on lock_path (flock), so that local
// ranks sharing a cache build each file once while the others wait.
void with_file_lock(const std::string& lock_path, const std::function<void()>& fn);
// Writes a file through a temporary name next to it: append() streams bytes, commit()
// fsyncs and renames it into place; destroyed uncommitted (an error on the way), the
// temporary is removed. fix ends the error line when the file cannot be created.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path, const std::string& fix = "");
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void append(const void* data, size_t n);
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};
// Writes content to path through a temporary file, fsync and rename.
void write_file_atomic(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);
// FNV-1a 64-bit, as 16 hex digits: cache keys for corpora and tokenizers.
std::string content_hash(const std::string& data);

}  // namespace strata
