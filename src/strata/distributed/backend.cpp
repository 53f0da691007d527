#include "strata/distributed/backend.h"

// Note [gloo headers]: the torch wheel ships ProcessGroupGloo.hpp but not the gloo
// headers it includes; Debian's libgloo-dev provides them. Only this file sees
// them, and only pointer types and out-of-line torch symbols are used, so the
// gloo version skew does not matter. libgloo itself is never linked: the gloo
// inside libtorch_cpu does the work.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/distributed/rendezvous.h"

namespace strata {

c10::intrusive_ptr<c10d::Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                               int64_t rank, int64_t size, c10::DeviceType device,
                                               std::chrono::milliseconds timeout) {
  if (device == c10::DeviceType::CUDA) {
#ifdef STRATA_CUDA
    return make_nccl_backend(store, rank, size, timeout);
#else
    STRATA_FAIL(
        "training.device=cuda needs a CUDA build of Strata; rebuild with -DSTRATA_CUDA=ON "
        "against a CUDA libtorch, or use training.device=cpu");
#endif
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  // Loopback unless the rendezvous address is another host: the interface that
  // reaches MASTER_ADDR is the one peers can reach us on (not whatever the host name
  // resolves to, which in a container or network namespace may be no interface at all).
  const std::string master = get_env("MASTER_ADDR").value_or("127.0.0.1");
  std::string host = get_env("STRATA_GLOO_HOST")
                         .value_or(master == "127.0.0.1" ? master : local_address_toward(master));
  opts->devices.push_back(host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                       : c10d::ProcessGroupGloo::createDeviceForHostname(host));
  opts->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank),
                                                     static_cast<int>(size), opts);
}

}  // namespace strata
