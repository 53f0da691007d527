#include "strata/distributed/mesh.h"

#include <signal.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "strata/core/errors.h"
#include "strata/distributed/backend.h"

namespace strata {

Mesh::Mesh(const WorldInfo& info, const ParallelDims& dims, c10::DeviceType device,
           std::chrono::milliseconds timeout)
    : dims_(dims), rank_(info.rank) {
  // Note [SIGPIPE]: when a peer dies, a write to its socket raises SIGPIPE, which
  // would kill this rank silently (status 141) before c10d can report anything.
  // Ignored, the write fails with EPIPE and the collective fails with a message.
  signal(SIGPIPE, SIG_IGN);
  STRATA_CHECK(dims.world() == info.world_size, "the layout ", dims.to_string(), " needs ",
               dims.world(), " processes but ", info.world_size,
               " were started; change the process count or parallel.dp/tp/pp");
  store_ = create_store(info, timeout);
  for (Axis axis : {Axis::kWorld, Axis::kDp, Axis::kTp, Axis::kPp}) {
    auto group = dims.group_of(axis, rank_);
    if (group.size() == 1) {  // a group of one needs no process group
      comms_[static_cast<size_t>(axis)] = Comm(nullptr, axis_name(axis), 0, 1, group, timeout);
      continue;
    }
    // Groups are named by axis and their first rank, which identifies the group.
    std::string prefix = c10::str(axis_name(axis), "/", group.front());
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    int64_t idx = std::find(group.begin(), group.end(), rank_) - group.begin();
    auto pg = make_backend(store, idx, static_cast<int64_t>(group.size()), device, timeout);
    comms_[static_cast<size_t>(axis)] =
        Comm(pg, axis_name(axis), idx, static_cast<int64_t>(group.size()), group, timeout);
  }
}

}  // namespace strata
