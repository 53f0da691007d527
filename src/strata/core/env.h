#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace strata {

std::optional<std::string> get_env(const char* name);
// Parses an integer variable; a set but malformed value is a user error naming it.
std::optional<int64_t> get_env_int(const char* name);
// Home for caches (tokenizers, corpora): $STRATA_CACHE, else $XDG_CACHE_HOME/strata, else
// ~/.cache/strata.
std::string cache_dir();
// Makes the directory and its parents; a failure is a user error naming the path.
void make_dirs(const std::string& path);

}  // namespace strata
