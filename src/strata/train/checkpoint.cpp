#include "strata/train/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "strata/core/errors.h"
#include "strata/core/files.h"

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

void write_shard(const std::string& dir, int64_t rank, const std::vector<TensorPiece>& pieces,
                 const std::function<void(size_t)>& on_piece) {
  fs::create_directories(dir);
  const std::string base = dir + "/shard-" + std::to_string(rank);
  AtomicFileWriter bin(base + ".bin", "; make checkpoint.dir writable");
  nlohmann::json index = nlohmann::json::array();
  int64_t at_byte = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const TensorPiece& p = pieces[i];
    if (on_piece) on_piece(i);
    // One piece's contiguous host copy at a time (Note [checkpoint layout]).
    at::Tensor t = p.tensor.detach().to(at::kCPU).contiguous();
    const size_t n = t.numel() * t.element_size();
    const auto* data = static_cast<const char*>(t.data_ptr());
    nlohmann::json e = {{"name", p.name},
                        {"dtype", c10::toString(t.scalar_type())},
                        {"shape", t.sizes().vec()},
                        {"global_shape", p.global_shape.empty() ? t.sizes().vec() : p.global_shape},
                        {"byte_offset", at_byte},
                        {"nbytes", n},
                        {"crc32", crc_of(data, n)}};
    if (p.flat_offset >= 0) {
      e["flat_offset"] = p.flat_offset;
      if (!p.box_shape.empty()) {
        e["box_shape"] = p.box_shape;
        e["offsets"] = p.offsets;
      }
    } else {
      e["offsets"] = p.offsets.empty() ? std::vector<int64_t>(t.dim(), 0) : p.offsets;
    }
    index.push_back(std::move(e));
    bin.append(data, n);
    at_byte += static_cast<int64_t>(n);
  }
  bin.commit();
  write_file_atomic(base + ".json", index.dump(1));
}

std::vector<FlatRun> flat_runs(const std::vector<int64_t>& global_shape,
                               const std::vector<int64_t>& offsets,
                               const std::vector<int64_t>& shape) {
  const auto dims = static_cast<int64_t>(shape.size());
  int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (numel == 0) return {};
  if (dims == 0) return {{0, 0, 1}};
  std::vector<int64_t> stride(static_cast<size_t>(dims), 1);
  for (int64_t d = dims - 2; d >= 0; --d) stride[d] = stride[d + 1] * global_shape[d + 1];
  // The trailing dimensions the piece spans whole fold into its runs.
  int64_t split = dims - 1;
  while (split > 0 && shape[split] == global_shape[split] && offsets[split] == 0) --split;
  const int64_t run = shape[split] * stride[split];
  std::vector<FlatRun> out;
  out.reserve(static_cast<size_t>(numel / run));
  std::vector<int64_t> idx(static_cast<size_t>(split), 0);  // over dimensions [0, split)
  for (int64_t local = 0; local < numel; local += run) {
    int64_t g = offsets[split] * stride[split];
    for (int64_t d = 0; d < split; ++d) g += (offsets[d] + idx[d]) * stride[d];
    out.push_back({g, local, run});
    for (int64_t d = split - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<FlatRun> box_flat_runs(const std::vector<int64_t>& global_shape,
                                   const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& box_shape, int64_t flat_offset,
                                   int64_t length) {
  std::vector<FlatRun> out;
  const int64_t end = flat_offset + length;
  for (const FlatRun& r : flat_runs(global_shape, offsets, box_shape)) {
    const int64_t lo = std::max(r.local, flat_offset), hi = std::min(r.local + r.length, end);
    if (lo < hi) out.push_back({r.global + lo - r.local, lo - flat_offset, hi - lo});
  }
  return out;
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

std::string locate_checkpoint(const std::string& path) {
  if (fs::exists(path + "/meta.json")) return path;
  for (const std::string& root : {path, path + "/checkpoints"}) {
    const std::string dir = resolve_checkpoint(root, "latest");
    if (!dir.empty()) return dir;
  }
  STRATA_FAIL(path,
              " holds no checkpoint (no meta.json, no latest); give a step-N folder, a "
              "checkpoint.dir or a run directory");
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
        const bool flat = j.contains("flat_offset"), boxed = j.contains("box_shape");
        entries_.emplace(
            j.at("name").get<std::string>(),
            Entry{shard, j.at("dtype"), j.at("global_shape"),
                  flat && !boxed ? std::vector<int64_t>{}
                                 : j.at("offsets").get<std::vector<int64_t>>(),
                  j.at("shape"), flat ? j.at("flat_offset").get<int64_t>() : -1,
                  boxed ? j.at("box_shape").get<std::vector<int64_t>>() : std::vector<int64_t>{},
                  j.at("byte_offset"), j.at("nbytes"), j.at("crc32")});
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
  const std::vector<int64_t> shape = global_shape(name);
  STRATA_CHECK(static_cast<int64_t>(shape.size()) == out.dim(), "checkpoint tensor '", name,
               "' has ", shape.size(), " dimensions, the model expects ", out.dim(),
               "; it was written for another model");
  const std::vector<int64_t> off = offsets.empty() ? std::vector<int64_t>(out.dim(), 0) : offsets;
  for (int64_t d = 0; d < out.dim(); ++d)
    STRATA_CHECK(off[d] >= 0 && off[d] + out.size(d) <= shape[d], "checkpoint tensor '", name,
                 "' has shape ", c10::IntArrayRef(shape), ", which does not hold the region of ",
                 out.sizes(), " at ", c10::IntArrayRef(off), "; it was written for another model");
  read_runs(name, out, flat_runs(shape, off, out.sizes().vec()));
}

void CheckpointReader::read_flat(const std::string& name, at::Tensor out, int64_t offset) const {
  int64_t numel = 1;
  for (auto s : global_shape(name)) numel *= s;
  STRATA_CHECK(offset >= 0 && offset + out.numel() <= numel, "checkpoint tensor '", name, "' has ",
               numel, " elements, fewer than the ", offset + out.numel(),
               " this run reads; it was written for another model");
  read_runs(name, out, {{offset, 0, out.numel()}});
}

void CheckpointReader::read_box_flat(const std::string& name, at::Tensor out,
                                     const std::vector<int64_t>& offsets,
                                     const std::vector<int64_t>& box_shape, int64_t offset) const {
  const std::vector<int64_t> shape = global_shape(name);
  int64_t numel = 1;
  bool inside = shape.size() == box_shape.size() && offsets.size() == box_shape.size();
  for (size_t d = 0; inside && d < shape.size(); ++d) {
    inside = offsets[d] >= 0 && offsets[d] + box_shape[d] <= shape[d];
    numel *= box_shape[d];
  }
  STRATA_CHECK(inside && offset >= 0 && offset + out.numel() <= numel, "checkpoint tensor '", name,
               "' has shape ", c10::IntArrayRef(shape), ", which does not hold the ",
               "region this run reads; it was written for another model");
  read_runs(name, out, box_flat_runs(shape, offsets, box_shape, offset, out.numel()));
}

void CheckpointReader::read_runs(const std::string& name, at::Tensor out,
                                 const std::vector<FlatRun>& want) const {
  auto range = entries_.equal_range(name);
  STRATA_CHECK(range.first != range.second, "checkpoint ", dir_, " has no tensor '", name,
               "'; it was written for another model or config");
  at::Tensor dst = out.is_contiguous() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
  at::Tensor dst_flat = dst.view({-1});
  int64_t covered = 0;
  for (auto it = range.first; it != range.second; ++it) {
    const Entry& e = it->second;
    const int64_t len = e.shape.empty() ? 1 : e.shape[0];
    const std::vector<FlatRun> have =
        e.flat_offset < 0 ? flat_runs(e.global_shape, e.offsets, e.shape)
        : e.box_shape.empty()
            ? std::vector<FlatRun>{{e.flat_offset, 0, len}}
            : box_flat_runs(e.global_shape, e.offsets, e.box_shape, e.flat_offset, len);
    // Both run lists ascend in global position: merge them.
    std::vector<std::array<int64_t, 3>> copies;  // (piece local, out local, length)
    for (size_t a = 0, b = 0; a < have.size() && b < want.size();) {
      const int64_t lo = std::max(have[a].global, want[b].global);
      const int64_t hi = std::min(have[a].global + have[a].length, want[b].global + want[b].length);
      if (lo < hi)
        copies.push_back(
            {have[a].local + lo - have[a].global, want[b].local + lo - want[b].global, hi - lo});
      if (have[a].global + have[a].length < want[b].global + want[b].length)
        ++a;
      else
        ++b;
    }
    if (copies.empty()) continue;
    std::string bytes(static_cast<size_t>(e.nbytes), '\0');
    std::ifstream in(dir_ + "/shard-" + std::to_string(e.shard) + ".bin", std::ios::binary);
    in.seekg(e.byte_offset);
    in.read(bytes.data(), e.nbytes);
    STRATA_CHECK(in.good() && crc_of(bytes.data(), bytes.size()) == e.crc, "checkpoint ", dir_,
                 " is corrupt: tensor '", name, "' in shard ", e.shard,
                 " fails its checksum; resume from an older checkpoint");
    int64_t n = 1;
    for (auto s : e.shape) n *= s;
    at::Tensor piece = at::from_blob(bytes.data(), {n}, dtype_from(e.dtype));
    at::NoGradGuard no_grad;
    for (const auto& [src, to, len] : copies) {
      dst_flat.narrow(0, to, len).copy_(piece.narrow(0, src, len));
      covered += len;
    }
  }
  if (!dst.is_same(out)) {
    at::NoGradGuard no_grad;
    out.copy_(dst);
  }
  STRATA_CHECK(covered == out.numel(), "checkpoint ", dir_, " covers ", covered, " of the ",
               out.numel(), " elements wanted of '", name, "'; shards are missing");
}

ModelSpec checkpoint_model_spec(const CheckpointReader& r, const std::vector<Family>& families,
                                const std::string& need) {
  STRATA_CHECK(r.meta().contains("model"), "checkpoint ", r.dir(),
               " does not record its model's shape (written by an earlier Strata); resume it "
               "and save once with this Strata");
  const ModelSpec spec = spec_from_json(r.meta()["model"]);
  STRATA_CHECK(std::find(families.begin(), families.end(), spec.family) != families.end(),
               "checkpoint ", r.dir(), " holds a ", r.meta()["model"].value("family", "?"),
               " model; ", need);
  return spec;
}

}  // namespace strata
