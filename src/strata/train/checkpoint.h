#pragma once
#include <ATen/Tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

// One piece of a (possibly sharded) tensor: where it sits in the global tensor.
struct TensorPiece {
  std::string name;
  at::Tensor tensor;                  // the piece (local shape)
  std::vector<int64_t> global_shape;  // empty: the piece is the whole tensor
  std::vector<int64_t> offsets;       // per dimension; empty: zeros
};

// Note [checkpoint layout]
// <root>/step-00000100/ holds shard-<rank>.bin (raw bytes of that rank's pieces),
// shard-<rank>.json (for each piece: name, dtype, global shape, offsets, local
// shape, byte offset, length, CRC-32) and meta.json (step, config, layout, sampler).
// A checkpoint describes shards, not layouts: a reader asks for a global region by
// name and gets it assembled from whichever pieces overlap it. All files are
// written under step-N.tmp/, fsynced, and the directory is renamed when every
// rank is done, so a crash never leaves a half-written checkpoint under a real name.
std::string checkpoint_dir_name(int64_t step);

// Writes this rank's pieces into dir (the .tmp directory).
void write_shard(const std::string& dir, int64_t rank, const std::vector<TensorPiece>& pieces);
// Rank 0, after every shard is written: meta.json, rename dir.tmp -> dir, update
// <root>/latest, and delete all but the newest `keep` checkpoints.
void finalize_checkpoint(const std::string& root, int64_t step, const nlohmann::json& meta,
                         int64_t keep);
// "latest" under root (or "" when there is none); a path is returned as it is.
// Removes the step-N.tmp folders under root that a killed run left (never renamed into
// place, so nothing refers to them); returns their paths.
std::vector<std::string> remove_unfinished_checkpoints(const std::string& root);
std::string resolve_checkpoint(const std::string& root, const std::string& spec);

class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  const nlohmann::json& meta() const { return meta_; }
  bool has(const std::string& name) const;
  // Fills `out` (shaped like the region) with the global region starting at
  // offsets (empty: the whole tensor), from all overlapping pieces; checks CRCs.
  void read(const std::string& name, at::Tensor out,
            const std::vector<int64_t>& offsets = {}) const;
  std::vector<int64_t> global_shape(const std::string& name) const;

 private:
  struct Entry {
    int64_t shard;
    std::string dtype;
    std::vector<int64_t> global_shape, offsets, shape;
    int64_t byte_offset, nbytes;
    uint32_t crc;
  };
  std::string dir_;
  nlohmann::json meta_;
  std::multimap<std::string, Entry> entries_;
};

}  // namespace strata
