#include "strata/core/env.h"

#include <cstdlib>
#include <filesystem>

#include "strata/core/errors.h"

namespace strata {

std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> get_env_int(const char* name) {
  auto v = get_env(name);
  if (!v) return std::nullopt;
  try {
    size_t pos = 0;
    int64_t out = std::stoll(*v, &pos);
    if (pos == v->size()) return out;
  } catch (const std::exception&) {
  }
  STRATA_FAIL("environment variable ", name, "='", *v,
              "' is not an integer; set it to a whole number");
}

std::string cache_dir() {
  if (auto v = get_env("STRATA_CACHE")) return *v;
  if (auto v = get_env("XDG_CACHE_HOME")) return *v + "/strata";
  if (auto v = get_env("HOME")) return *v + "/.cache/strata";
  return "/tmp/strata-cache";
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  STRATA_CHECK(!ec, "cannot create directory ", path, ": ", ec.message(),
               "; choose a writable location");
}

}  // namespace strata
