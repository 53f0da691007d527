#pragma once
#include <c10/core/Device.h>

#include <array>
#include <chrono>

#include "strata/distributed/comm.h"
#include "strata/distributed/parallel_dims.h"
#include "strata/distributed/rendezvous.h"

namespace strata {

// One c10d process group per mesh axis (world, dp, tp, pp), built from the pure
// rank grid: each rank creates only the groups it belongs to, under a store
// prefix that names the axis and group, so no rank waits on groups it is not in.
class Mesh {
 public:
  Mesh(const WorldInfo& info, const ParallelDims& dims, c10::DeviceType device,
       std::chrono::milliseconds timeout);

  const ParallelDims& dims() const { return dims_; }
  int64_t rank() const { return rank_; }
  int64_t world_size() const { return dims_.world(); }
  Comm& comm(Axis axis) { return comms_[static_cast<size_t>(axis)]; }
  Coord coord() const { return dims_.coord_of(rank_); }
  // The rendezvous store (thread-safe): a channel that is not a collective.
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

 private:
  ParallelDims dims_;
  int64_t rank_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::array<Comm, 4> comms_;
};

}  // namespace strata
