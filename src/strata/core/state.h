#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Note [component state]
// A checkpoint is the union of what each component (model, optimizer, gradient sync,
// loss scaler, sampler, RNG) says it holds, as pieces: a piece is a region of a named
// global tensor, so a component sharded over ranks (ZeRO's flat shards, tensor-parallel
// slices, pipeline stages) saves only its own regions and nobody gathers. A component
// loads by asking a PieceReader for the regions it needs now, whichever ranks wrote
// them: that is what lets a checkpoint load into another layout.

// One piece of a (possibly sharded) tensor and where it sits in the global tensor:
// either a box (offsets per dimension) or, with flat_offset >= 0, a 1-D range of the
// row-major flattened global tensor (a ZeRO shard of a parameter), or with box_shape
// too a 1-D range of the flattened box of that shape at offsets (a ZeRO shard of a
// tensor-parallel slice).
struct TensorPiece {
  std::string name;
  at::Tensor tensor;                  // the piece (local shape; 1-D for a flat range)
  std::vector<int64_t> global_shape;  // empty: the piece is the whole tensor
  std::vector<int64_t> offsets;       // per dimension; empty: zeros
  int64_t flat_offset = -1;           // >= 0: a flat range starting here
  std::vector<int64_t> box_shape{};   // with flat_offset: the range is of this box's elements
};

// A tensor-parallel slice of a global tensor as runs of its local rows (dim 0), each
// with the box offsets where it sits in the global tensor: one run for a plain split,
// several for a grouped one (attention's [q; k; v]).
struct SliceRun {
  int64_t local_begin = 0, length = 0;
  std::vector<int64_t> offsets;
};

class PieceReader {
 public:
  virtual ~PieceReader() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual std::vector<int64_t> global_shape(const std::string& name) const = 0;
  // Fills out (shaped like the region) with the box at offsets (empty: the whole
  // tensor) of the global tensor, from every stored piece that overlaps it.
  virtual void read(const std::string& name, at::Tensor out,
                    const std::vector<int64_t>& offsets = {}) const = 0;
  // Fills the 1-D out with elements [offset, offset + numel) of the flattened tensor.
  virtual void read_flat(const std::string& name, at::Tensor out, int64_t offset) const = 0;
  // Fills the 1-D out with elements [offset, offset + numel) of the flattened box of
  // box_shape at offsets (a ZeRO shard of a tensor-parallel slice).
  virtual void read_box_flat(const std::string& name, at::Tensor out,
                             const std::vector<int64_t>& offsets,
                             const std::vector<int64_t>& box_shape, int64_t offset) const = 0;
  // One error line, naming both shapes, unless name is stored with this global shape.
  void expect_shape(const std::string& name, const std::vector<int64_t>& shape) const;
};

// What a component implements to take part in checkpoints.
class Stateful {
 public:
  virtual ~Stateful() = default;
  // Appends this rank's pieces (nothing another rank also writes).
  virtual void save_state(std::vector<TensorPiece>& out) = 0;
  virtual void load_state(const PieceReader& in) = 0;
};

}  // namespace strata
