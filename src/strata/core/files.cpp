#include "strata/core/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "strata/core/errors.h"

namespace strata {

void with_file_lock(const std::string& lock_path, const std::function<void()>& fn) {
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  STRATA_CHECK(fd >= 0, "cannot open lock file ", lock_path, ": ", std::strerror(errno),
               "; make the cache directory writable or set data.cache_dir");
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  try {
    fn();
  } catch (...) {
    flock(fd, LOCK_UN);
    close(fd);
    throw;
  }
  flock(fd, LOCK_UN);
  close(fd);
}

AtomicFileWriter::AtomicFileWriter(std::string path, const std::string& fix)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(getpid())) {
  fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STRATA_CHECK(fd_ >= 0, "cannot write ", tmp_, ": ", std::strerror(errno), fix);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;
  close(fd_);
  unlink(tmp_.c_str());
}

void AtomicFileWriter::append(const void* data, size_t n) {
  const auto* bytes = static_cast<const char*>(data);
  size_t off = 0;
  while (off < n) {
    const ssize_t w = write(fd_, bytes + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      close(fd_);
      fd_ = -1;
      unlink(tmp_.c_str());
      STRATA_FAIL("cannot write ", tmp_, ": ", std::strerror(err), "; is the disk full?");
    }
    off += static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  const bool ok = fsync(fd_) == 0;
  close(fd_);
  fd_ = -1;
  STRATA_CHECK(ok && std::rename(tmp_.c_str(), path_.c_str()) == 0, "cannot finish writing ", path_,
               ": ", std::strerror(errno));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFileWriter out(path);
  out.append(content.data(), content.size());
  out.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.good(), "cannot read ", path, ": ", std::strerror(errno),
               "; check the path (data.path / checkpoint.resume)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string content_hash(const std::string& data) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace strata
