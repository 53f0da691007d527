#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// The axes of the device mesh. kWorld is every rank.
enum class Axis { kWorld, kDp, kTp, kPp };
const char* axis_name(Axis axis);

struct Coord {
  int64_t dp = 0;
  int64_t tp = 0;
  int64_t pp = 0;
  bool operator==(const Coord&) const = default;
};

// Note [rank grid]
// rank = (pp * dp_size + dp) * tp_size + tp: tp is innermost so the ranks of one
// tensor-parallel group are neighbours (one node, fastest links), then dp, then
// pp outermost (pipeline stages exchange the least data). Pure arithmetic, no
// communication: every rank computes every group without asking the others.
class ParallelDims {
 public:
  // Validates dp * tp * pp == world; dp == 0 means world / (tp * pp).
  ParallelDims(int64_t dp, int64_t tp, int64_t pp, int64_t world);

  int64_t dp() const { return dp_; }
  int64_t tp() const { return tp_; }
  int64_t pp() const { return pp_; }
  int64_t world() const { return dp_ * tp_ * pp_; }
  int64_t size(Axis axis) const;

  int64_t rank_of(const Coord& c) const;
  Coord coord_of(int64_t rank) const;
  int64_t index(Axis axis, int64_t rank) const;  // this rank's position along the axis
  // The ranks that share every coordinate with `rank` except along `axis`, in axis order.
  std::vector<int64_t> group_of(Axis axis, int64_t rank) const;
  // Every group along the axis (a partition of all ranks), ordered by their first rank.
  std::vector<std::vector<int64_t>> groups(Axis axis) const;

  // Model-shape checks: heads divisible by tp, layers by pp.
  void check_model(int64_t n_head, int64_t n_layer) const;
  std::string to_string() const;

 private:
  int64_t dp_, tp_, pp_;
};

}  // namespace strata
