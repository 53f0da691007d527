#include "strata/train/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "strata/core/errors.h"
#include "strata/train/data/dataset.h"

namespace fs = std::filesystem;

namespace strata {

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

namespace {

uint32_t crc_of(const void* data, size_t n) {
  return static_cast<uint32_t>(crc32(0L, static_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

at::ScalarType dtype_from(const std::string& s) {
  for (auto t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kByte,
                 at::kChar, at::kBool, at::kShort})
    if (s == c10::toString(t)) return t;
  STRATA_FAIL("checkpoint holds a tensor of unknown dtype ", s,
              "; it was written by a newer Strata");
}

void fsync_path(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

}  // namespace

void write_shard(const std::string& dir, int64_t rank, const std::vector<TensorPiece>& pieces) {
  fs::create_directories(dir);
  std::string blob;
  nlohmann::json index = nlohmann::json::array();
  for (const auto& p : pieces) {
    at::Tensor t = p.tensor.detach().to(at::kCPU).contiguous();
    const size_t n = t.numel() * t.element_size();
    const auto* data = static_cast<const char*>(t.data_ptr());
    index.push_back({{"name", p.name},
                     {"dtype", c10::toString(t.scalar_type())},
                     {"shape", t.sizes().vec()},
                     {"global_shape", p.global_shape.empty() ? t.sizes().vec() : p.global_shape},
                     {"offsets", p.offsets.empty() ? std::vector<int64_t>(t.dim(), 0) : p.offsets},
                     {"byte_offset", blob.size()},
                     {"nbytes", n},
                     {"crc32", crc_of(data, n)}});
    blob.append(data, n);
  }
  const std::string base = dir + "/shard-" + std::to_string(rank);
  write_file_atomic(base + ".bin", blob);
  write_file_atomic(base + ".json", index.dump(1));
}

void finalize_checkpoint(const std::string& root, int64_t step, const nlohmann::json& meta,
                         int64_t keep) {
  const std::string final_dir = root + "/" + checkpoint_dir_name(step);
  const std::string tmp = final_dir + ".tmp";
  write_file_atomic(tmp + "/meta.json", meta.dump(1));
  fsync_path(tmp);
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  STRATA_CHECK(!ec, "cannot finish checkpoint ", final_dir, ": ", ec.message());
  fsync_path(root);
  write_file_atomic(root + "/latest", checkpoint_dir_name(step) + "\n");
  std::vector<std::string> done;
  for (const auto& e : fs::directory_iterator(root)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos) done.push_back(name);
  }
  std::sort(done.begin(), done.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < done.size(); ++i)
    fs::remove_all(root + "/" + done[i], ec);
}

std::vector<std::string> remove_unfinished_checkpoints(const std::string& root) {
  // A run killed while writing (SIGKILL, power loss) leaves step-N.tmp; it was never
  // renamed into place, so nothing refers to it.
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || e.path().extension() != ".tmp") continue;
    fs::remove_all(e.path(), ec);
    removed.push_back(e.path().string());
  }
  return removed;
}

std::string resolve_checkpoint(const std::string& root, const std::string& spec) {
  if (spec != "latest") {
    STRATA_CHECK(
        fs::exists(spec + "/meta.json"), "checkpoint.resume=", spec,
        " is not a finished checkpoint (no meta.json); give a step-N directory or 'latest'");
    return spec;
  }
  if (!fs::exists(root + "/latest")) return "";
  std::string name = read_file(root + "/latest");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return root + "/" + name;
}

namespace {
// Parses one of a checkpoint's JSON files; a damaged one is a user-facing error that
// names the checkpoint and the file, never the JSON library's own wording alone.
template <typename F>
auto parse_checkpoint_json(const std::string& dir, const std::string& file, F&& use) {
  const std::string path = dir + "/" + file;
  try {
    return use(nlohmann::json::parse(read_file(path)));
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    if (const auto p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
    STRATA_FAIL("checkpoint ", dir, " is corrupt: ", file, " cannot be read (", why,
                "); resume from another checkpoint (checkpoint.resume=<step-N directory>)");
  }
}
}  // namespace

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  STRATA_CHECK(fs::is_directory(dir), "checkpoint ", dir,
               " does not exist; give a step-N directory or 'latest'");
  meta_ = parse_checkpoint_json(dir, "meta.json", [](nlohmann::json j) {
    (void)j.at("step").get<int64_t>();
    return j;
  });
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind("shard-", 0) != 0 || e.path().extension() != ".json") continue;
    const std::string digits = name.substr(6, name.size() - 6 - 5);
    STRATA_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos,
                 "checkpoint ", dir, " holds ", name,
                 ", which is not a shard index (shard-<rank>.json); remove it");
    const int64_t shard = std::stoll(digits);
    parse_checkpoint_json(dir, name, [&](const nlohmann::json& index) {
      for (const auto& j : index) {
        entries_.emplace(j.at("name").get<std::string>(),
                         Entry{shard, j.at("dtype"), j.at("global_shape"), j.at("offsets"),
                               j.at("shape"), j.at("byte_offset"), j.at("nbytes"), j.at("crc32")});
      }
      return 0;
    });
  }
}

bool CheckpointReader::has(const std::string& name) const {
  return entries_.count(name) > 0;
}

std::vector<int64_t> CheckpointReader::global_shape(const std::string& name) const {
  auto it = entries_.find(name);
  STRATA_CHECK(it != entries_.end(), "checkpoint ", dir_, " has no tensor '", name,
               "'; it was written for another model");
  return it->second.global_shape;
}

void CheckpointReader::read(const std::string& name, at::Tensor out,
                            const std::vector<int64_t>& offsets) const {
  auto range = entries_.equal_range(name);
  STRATA_CHECK(range.first != range.second, "checkpoint ", dir_, " has no tensor '", name,
               "'; it was written for another model or config");
  const std::vector<int64_t> want_off =
      offsets.empty() ? std::vector<int64_t>(out.dim(), 0) : offsets;
  int64_t covered = 0;
  for (auto it = range.first; it != range.second; ++it) {
    const Entry& e = it->second;
    STRATA_CHECK(static_cast<int64_t>(e.shape.size()) == out.dim(), "checkpoint tensor '", name,
                 "' has ", e.shape.size(), " dimensions, the model expects ", out.dim(),
                 "; it was written for another model");
    // Intersect the piece's box with the wanted box, dimension by dimension.
    std::vector<int64_t> lo(out.dim()), len(out.dim());
    bool empty = false;
    for (int64_t d = 0; d < out.dim(); ++d) {
      const int64_t a = std::max(e.offsets[d], want_off[d]);
      const int64_t b = std::min(e.offsets[d] + e.shape[d], want_off[d] + out.size(d));
      lo[d] = a;
      len[d] = b - a;
      empty |= len[d] <= 0;
    }
    if (empty) continue;
    std::string bytes(static_cast<size_t>(e.nbytes), '\0');
    std::ifstream in(dir_ + "/shard-" + std::to_string(e.shard) + ".bin", std::ios::binary);
    in.seekg(e.byte_offset);
    in.read(bytes.data(), e.nbytes);
    STRATA_CHECK(in.good() && crc_of(bytes.data(), bytes.size()) == e.crc, "checkpoint ", dir_,
                 " is corrupt: tensor '", name, "' in shard ", e.shard,
                 " fails its checksum; resume from an older checkpoint");
    at::Tensor piece = at::from_blob(bytes.data(), e.shape, dtype_from(e.dtype));
    at::Tensor src = piece, dst = out;
    for (int64_t d = 0; d < out.dim(); ++d) {
      src = src.narrow(d, lo[d] - e.offsets[d], len[d]);
      dst = dst.narrow(d, lo[d] - want_off[d], len[d]);
    }
    at::NoGradGuard no_grad;
    dst.copy_(src);
    int64_t n = 1;
    for (auto l : len) n *= l;
    covered += n;
  }
  STRATA_CHECK(covered == out.numel(), "checkpoint ", dir_, " covers ", covered, " of the ",
               out.numel(), " elements wanted of '", name, "'; shards are missing");
}

}  // namespace strata
