#include "strata/distributed/parallel_dims.h"

#include "strata/core/errors.h"

namespace strata {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::kWorld:
      return "world";
    case Axis::kDp:
      return "dp";
    case Axis::kTp:
      return "tp";
    case Axis::kPp:
      return "pp";
  }
  return "?";
}

namespace {
std::string divisors(int64_t n) {
  std::string out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "{" + out + "}";
}
}  // namespace

ParallelDims::ParallelDims(int64_t dp, int64_t tp, int64_t pp, int64_t world)
    : dp_(dp), tp_(tp), pp_(pp) {
  STRATA_CHECK(world >= 1, "world size ", world, " must be at least 1");
  STRATA_CHECK(tp >= 1 && pp >= 1 && dp >= 0, "parallel sizes must be positive (dp=", dp,
               " tp=", tp, " pp=", pp, ")");
  STRATA_CHECK(world % (tp * pp) == 0, "world size ", world, " is not divisible by tp*pp=", tp, "*",
               pp, "=", tp * pp, "; choose tp and pp whose product divides ", world,
               " (divisors: ", divisors(world), ")");
  if (dp == 0) dp_ = world / (tp * pp);
  STRATA_CHECK(dp_ * tp * pp == world, "dp*tp*pp = ", dp_, "*", tp, "*", pp, " = ", dp_ * tp * pp,
               " does not equal the world size ", world, "; set parallel.dp=", world / (tp * pp),
               " (or 0 to derive it) or change the number of processes");
}

int64_t ParallelDims::size(Axis axis) const {
  switch (axis) {
    case Axis::kWorld:
      return world();
    case Axis::kDp:
      return dp_;
    case Axis::kTp:
      return tp_;
    case Axis::kPp:
      return pp_;
  }
  return 1;
}

int64_t ParallelDims::rank_of(const Coord& c) const {
  STRATA_ASSERT(c.dp >= 0 && c.dp < dp_ && c.tp >= 0 && c.tp < tp_ && c.pp >= 0 && c.pp < pp_);
  return (c.pp * dp_ + c.dp) * tp_ + c.tp;
}

Coord ParallelDims::coord_of(int64_t rank) const {
  STRATA_ASSERT(rank >= 0 && rank < world(), "rank ", rank, " world ", world());
  return Coord{(rank / tp_) % dp_, rank % tp_, rank / (tp_ * dp_)};
}

int64_t ParallelDims::index(Axis axis, int64_t rank) const {
  Coord c = coord_of(rank);
  switch (axis) {
    case Axis::kWorld:
      return rank;
    case Axis::kDp:
      return c.dp;
    case Axis::kTp:
      return c.tp;
    case Axis::kPp:
      return c.pp;
  }
  return 0;
}

std::vector<int64_t> ParallelDims::group_of(Axis axis, int64_t rank) const {
  std::vector<int64_t> out;
  if (axis == Axis::kWorld) {
    for (int64_t r = 0; r < world(); ++r) out.push_back(r);
    return out;
  }
  Coord c = coord_of(rank);
  for (int64_t i = 0; i < size(axis); ++i) {
    Coord o = c;
    (axis == Axis::kDp ? o.dp : axis == Axis::kTp ? o.tp : o.pp) = i;
    out.push_back(rank_of(o));
  }
  return out;
}

std::vector<std::vector<int64_t>> ParallelDims::groups(Axis axis) const {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < world(); ++r) {
    auto g = group_of(axis, r);
    if (g.front() == r || (axis != Axis::kWorld && index(axis, r) == 0)) {
      if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
    }
  }
  return out;
}

void ParallelDims::check_model(int64_t n_head, int64_t n_layer) const {
  STRATA_CHECK(n_head % tp_ == 0, "tp=", tp_, " does not divide n_head=", n_head,
               "; choose tp from ", divisors(n_head));
  STRATA_CHECK(n_layer >= pp_, "pp=", pp_, " is larger than n_layer=", n_layer,
               "; choose pp <= ", n_layer);
}

std::string ParallelDims::to_string() const {
  return c10::str("dp=", dp_, " tp=", tp_, " pp=", pp_, " (world ", world(), ")");
}

}  // namespace strata
