#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata {

// Note [safetensors]: Hugging Face's weight format, small and documented: 8 bytes
// little-endian N, then N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin,
// end]}, "__metadata__": {str: str}}, then the raw little-endian data, offsets counted
// from the end of the header. The reader maps the file and checks everything a damaged or
// lying file could get wrong (a header longer than the file, offsets past the data or
// overlapping, a size that disagrees with dtype x shape, an unknown dtype) before any
// byte is read, so a bad file is one error line naming it and the tensor, never a crash
// or a read out of bounds. The writer takes the entries first (the header needs every
// offset) and then each tensor's bytes in order, so an export holds one tensor at a time.
struct SafeTensorEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data section
};

class SafeTensorsReader {
 public:
  explicit SafeTensorsReader(const std::string& path);
  ~SafeTensorsReader();
  SafeTensorsReader(const SafeTensorsReader&) = delete;
  SafeTensorsReader& operator=(const SafeTensorsReader&) = delete;
  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const SafeTensorEntry& entry(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A copy of the tensor (its own storage; the mapping may go away).
  at::Tensor read(const std::string& name) const;

 private:
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, SafeTensorEntry> index_;
  std::map<std::string, std::string> metadata_;
};

class SafeTensorsWriter {
 public:
  // entries' begin/end are assigned here, in the given order.
  SafeTensorsWriter(const std::string& path, std::vector<SafeTensorEntry> entries,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafeTensorsWriter();
  // The next entry's data: its dtype and shape must match.
  void write_next(const at::Tensor& t);
  // All written: fsync and rename into place.
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "F32", "BF16", ... <-> at::ScalarType; an unknown name is nullopt-like (returns false).
bool safetensors_dtype(const std::string& name, at::ScalarType& out);
std::string safetensors_dtype_name(at::ScalarType t);

}  // namespace strata
