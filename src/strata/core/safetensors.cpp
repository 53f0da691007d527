#include "strata/core/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "strata/core/errors.h"
#include "strata/core/files.h"

namespace strata {
namespace {

// The header may not be larger than this (the reference implementation's limit).
constexpr uint64_t kMaxHeader = 100 * 1024 * 1024;

struct DtypeName {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

}  // namespace

bool safetensors_dtype(const std::string& name, at::ScalarType& out) {
  for (const auto& d : kDtypes)
    if (name == d.name) {
      out = d.type;
      return true;
    }
  return false;
}

std::string safetensors_dtype_name(at::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  STRATA_FAIL("safetensors has no dtype for ", c10::toString(t));
}

SafeTensorsReader::SafeTensorsReader(const std::string& path) : path_(path) {
  const std::string bad = path + " is not a valid safetensors file: ";
  const std::string fix = "; re-export or re-download it";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STRATA_CHECK(fd >= 0, "cannot read ", path, ": ", std::strerror(errno),
               "; check the path (a Hugging Face folder holds model.safetensors)");
  struct stat st {};
  fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    STRATA_CHECK(m != MAP_FAILED, "cannot map ", path, ": ", std::strerror(errno));
    map_ = static_cast<const uint8_t*>(m);
  } else {
    close(fd);
  }
  STRATA_CHECK(size_ >= 8, bad, "it has ", size_, " bytes, fewer than the 8-byte header length",
               fix);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | map_[i];
  STRATA_CHECK(n <= kMaxHeader && n <= size_ - 8, bad, "its header says ", n,
               " bytes but the file has ", size_ - 8, " after the length", fix);
  data_start_ = 8 + static_cast<size_t>(n);
  const auto header = nlohmann::json::parse(map_ + 8, map_ + data_start_, nullptr, false);
  STRATA_CHECK(header.is_object(), bad, "its header is not a JSON object", fix);
  const uint64_t data_size = size_ - data_start_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      STRATA_CHECK(e.is_object(), bad, "__metadata__ is not an object", fix);
      for (const auto& [k, v] : e.items())
        if (v.is_string()) metadata_[k] = v.get<std::string>();
      continue;
    }
    STRATA_CHECK(e.is_object() && e.contains("dtype") && e["dtype"].is_string() &&
                     e.contains("shape") && e["shape"].is_array() && e.contains("data_offsets") &&
                     e["data_offsets"].is_array() && e["data_offsets"].size() == 2,
                 bad, "tensor '", name, "' lacks dtype, shape or data_offsets", fix);
    SafeTensorEntry t;
    t.name = name;
    STRATA_CHECK(safetensors_dtype(e["dtype"].get<std::string>(), t.dtype), bad, "tensor '", name,
                 "' has unknown dtype ", e["dtype"].get<std::string>(), fix);
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      STRATA_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), bad,
                   "tensor '", name, "' has a negative or non-integer dimension", fix);
      const uint64_t v = d.get<uint64_t>();
      STRATA_CHECK(v == 0 || numel <= data_size / v, bad, "tensor '", name,
                   "' is larger than the file's ", data_size, " data bytes", fix);
      numel *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = e["data_offsets"];
    STRATA_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(), bad, "tensor '", name,
                 "' has non-integer data_offsets", fix);
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    STRATA_CHECK(b <= en && en <= data_size, bad, "tensor '", name, "' spans bytes [", b, ", ", en,
                 ") but the data section has ", data_size, fix);
    const uint64_t want = numel * static_cast<uint64_t>(c10::elementSize(t.dtype));
    STRATA_CHECK(en - b == want, bad, "tensor '", name, "' has ", en - b, " bytes but its ",
                 e["dtype"].get<std::string>(), " shape needs ", want, fix);
    t.begin = static_cast<int64_t>(b);
    t.end = static_cast<int64_t>(en);
    ranges.emplace_back(b, en);
    index_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    STRATA_CHECK(ranges[i].first >= ranges[i - 1].second, bad,
                 "two tensors overlap in the data section", fix);
}

SafeTensorsReader::~SafeTensorsReader() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_);
}

const SafeTensorEntry& SafeTensorsReader::entry(const std::string& name) const {
  auto it = index_.find(name);
  STRATA_CHECK(it != index_.end(), path_, " has no tensor '", name,
               "'; is it a checkpoint of the model the config names?");
  return it->second;
}

std::vector<std::string> SafeTensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : index_) out.push_back(name);
  return out;
}

at::Tensor SafeTensorsReader::read(const std::string& name) const {
  const SafeTensorEntry& e = entry(name);
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  if (e.end > e.begin)
    std::memcpy(out.data_ptr(), map_ + data_start_ + e.begin, static_cast<size_t>(e.end - e.begin));
  return out;
}

struct SafeTensorsWriter::Impl {
  AtomicFileWriter file;
  std::vector<SafeTensorEntry> entries;
  size_t next = 0;
  explicit Impl(const std::string& path) : file(path, "; choose a writable output folder") {}
};

SafeTensorsWriter::SafeTensorsWriter(const std::string& path, std::vector<SafeTensorEntry> entries,
                                     const std::map<std::string, std::string>& metadata)
    : impl_(std::make_unique<Impl>(path)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t at = 0;
  for (auto& e : entries) {
    int64_t numel = 1;
    for (auto d : e.shape) numel *= d;
    e.begin = at;
    e.end = at + numel * static_cast<int64_t>(c10::elementSize(e.dtype));
    at = e.end;
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  impl_->file.append(len, 8);
  impl_->file.append(text.data(), text.size());
  impl_->entries = std::move(entries);
}

SafeTensorsWriter::~SafeTensorsWriter() = default;

void SafeTensorsWriter::write_next(const at::Tensor& t) {
  STRATA_ASSERT(impl_->next < impl_->entries.size(), "more tensors than entries");
  const SafeTensorEntry& e = impl_->entries[impl_->next++];
  STRATA_ASSERT(t.scalar_type() == e.dtype && t.sizes().vec() == e.shape, "tensor ", e.name,
                " does not match its entry");
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  impl_->file.append(c.data_ptr(), c.nbytes());
}

void SafeTensorsWriter::commit() {
  STRATA_ASSERT(impl_->next == impl_->entries.size(), "safetensors: ", impl_->next, " of ",
                impl_->entries.size(), " tensors written");
  impl_->file.commit();
}

}  // namespace strata
