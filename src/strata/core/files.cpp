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

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STRATA_CHECK(fd >= 0, "cannot write ", tmp, ": ", std::strerror(errno));
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      STRATA_FAIL("cannot write ", tmp, ": ", std::strerror(err), "; is the disk full?");
    }
    off += static_cast<size_t>(n);
  }
  bool ok = fsync(fd) == 0;
  close(fd);
  STRATA_CHECK(ok && std::rename(tmp.c_str(), path.c_str()) == 0, "cannot finish writing ", path,
               ": ", std::strerror(errno));
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
