#pragma once
#include <memory>

#include "strata/distributed/comm.h"
#include "strata/models/stage.h"

namespace strata {

// The tensor-parallel regions (Note [tensor-parallel regions]) over a tp process group:
// each collective goes through distributed/comm (timeouts, tracing) and is counted in
// the step's tp bytes.
std::shared_ptr<TpRegions> make_tp_regions(Comm& tp);

}  // namespace strata
