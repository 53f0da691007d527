#pragma once
#include <ATen/Tensor.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/core/state.h"
#include "strata/models/flavours.h"

namespace strata {

// Note [checkpoint layout]
// <root>/step-00000100/ holds shard-<rank>.bin (raw bytes of that rank's pieces),
// shard-<rank>.json (for each piece: name, dtype, global shape, offsets, local
// shape or flat offset, byte offset, length, CRC-32) and meta.json (step, config,
// layout, sampler). Each rank writes its own pieces only (Note [component state]),
// streaming them one at a time: a save needs no more memory than one piece's
// contiguous host copy.
// A checkpoint describes shards, not layouts: a reader asks for a global region by
// name and gets it assembled from whichever pieces overlap it. All files are
// written under step-N.tmp/, fsynced, and the directory is renamed when every
// rank is done, so a crash never leaves a half-written checkpoint under a real name.
std::string checkpoint_dir_name(int64_t step);

// Writes this rank's pieces into dir (the .tmp directory); on_piece(i) runs before
// piece i is written (progress for the heartbeat, a fault for the tests).
void write_shard(const std::string& dir, int64_t rank, const std::vector<TensorPiece>& pieces,
                 const std::function<void(size_t)>& on_piece = {});
// Rank 0, after every shard is written: meta.json, rename dir.tmp -> dir, update
// <root>/latest, and delete all but the newest `keep` checkpoints.
void finalize_checkpoint(const std::string& root, int64_t step, const nlohmann::json& meta,
                         int64_t keep);
// "latest" under root (or "" when there is none); a path is returned as it is.
// Removes the step-N.tmp folders under root that a killed run left (never renamed into
// place, so nothing refers to them); returns their paths.
std::vector<std::string> remove_unfinished_checkpoints(const std::string& root);
std::string resolve_checkpoint(const std::string& root, const std::string& spec);
// A step-N folder as given; else a checkpoint root's or a run directory's `latest`; else
// one error line.
std::string locate_checkpoint(const std::string& path);

// A contiguous run of a piece in the row-major flattened global tensor: global
// elements [global, global + length) are the piece's flat elements [local, local +
// length). A box piece is one run per row of its leading dimensions (one run when it
// spans whole trailing dimensions), a flat piece one run. Pure; tested alone.
struct FlatRun {
  int64_t global = 0, local = 0, length = 0;
};
std::vector<FlatRun> flat_runs(const std::vector<int64_t>& global_shape,
                               const std::vector<int64_t>& offsets,
                               const std::vector<int64_t>& shape);

// The runs of elements [flat_offset, flat_offset + length) of the flattened box of
// box_shape at offsets, local positions counted from flat_offset. Pure.
std::vector<FlatRun> box_flat_runs(const std::vector<int64_t>& global_shape,
                                   const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& box_shape, int64_t flat_offset,
                                   int64_t length);

class CheckpointReader : public PieceReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const nlohmann::json& meta() const { return meta_; }
  bool has(const std::string& name) const override;
  // Reads check each piece's CRC-32; regions may span pieces of any ranks and kinds.
  void read(const std::string& name, at::Tensor out,
            const std::vector<int64_t>& offsets = {}) const override;
  void read_flat(const std::string& name, at::Tensor out, int64_t offset) const override;
  void read_box_flat(const std::string& name, at::Tensor out, const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& box_shape, int64_t offset) const override;
  std::vector<int64_t> global_shape(const std::string& name) const override;

 private:
  struct Entry {
    int64_t shard;
    std::string dtype;
    std::vector<int64_t> global_shape, offsets, shape;
    int64_t flat_offset;             // -1: a box
    std::vector<int64_t> box_shape;  // with flat_offset: a range of this box's elements
    int64_t byte_offset, nbytes;
    uint32_t crc;
  };
  // Copies the stored elements overlapping the wanted runs into out (contiguous).
  void read_runs(const std::string& name, at::Tensor out, const std::vector<FlatRun>& want) const;
  std::string dir_;
  nlohmann::json meta_;
  std::multimap<std::string, Entry> entries_;
};

// The model shape the checkpoint records (meta.json "model"); one error line when it
// records none (an older checkpoint) or one of a family not in `families` (`need` says
// what the command takes, e.g. "strata generate samples from GPT flavours").
ModelSpec checkpoint_model_spec(const CheckpointReader& r, const std::vector<Family>& families,
                                const std::string& need);

}  // namespace strata
