#include "strata/distributed/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "strata/core/env.h"
#include "strata/core/errors.h"

namespace strata {

WorldInfo world_from_env() {
  WorldInfo w;
  auto addr = get_env("MASTER_ADDR");
  auto port = get_env_int("MASTER_PORT");
  if (addr) w.master_addr = *addr;
  if (port) w.master_port = *port;
  if (get_env("RANK") && get_env("WORLD_SIZE")) {
    w.source = "torchrun";
    w.rank = *get_env_int("RANK");
    w.world_size = *get_env_int("WORLD_SIZE");
    w.local_rank = get_env_int("LOCAL_RANK").value_or(w.rank);
    w.local_world_size = get_env_int("LOCAL_WORLD_SIZE").value_or(w.world_size);
  } else if (get_env("OMPI_COMM_WORLD_RANK")) {
    w.source = "openmpi";
    w.rank = *get_env_int("OMPI_COMM_WORLD_RANK");
    w.world_size = get_env_int("OMPI_COMM_WORLD_SIZE").value_or(1);
    w.local_rank = get_env_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    w.local_world_size = get_env_int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
  } else if (get_env("SLURM_PROCID") && get_env("SLURM_NTASKS")) {
    w.source = "slurm";
    w.rank = *get_env_int("SLURM_PROCID");
    w.world_size = *get_env_int("SLURM_NTASKS");
    w.local_rank = get_env_int("SLURM_LOCALID").value_or(0);
    w.local_world_size = get_env_int("SLURM_NTASKS_PER_NODE").value_or(w.world_size);
  }
  STRATA_CHECK(w.world_size >= 1 && w.rank >= 0 && w.rank < w.world_size, "rank ", w.rank,
               " is outside world size ", w.world_size, " (from ", w.source,
               " environment); check the launcher's variables");
  STRATA_CHECK(w.master_port >= 0 && w.master_port < 65536, "MASTER_PORT=", w.master_port,
               " is not a TCP port; use 1..65535");
  return w;
}

namespace {
// A TCP socket bound to addr:port (0: a free port), or one error line naming the fix.
int bound_socket(const std::string& addr, int64_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  STRATA_CHECK(rc == 0 && res, "cannot resolve master address '", addr, "': ", gai_strerror(rc),
               "; pass --master-addr with a reachable host or IP");
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  STRATA_CHECK(fd >= 0, "cannot create a socket: ", std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int err = bind(fd, res->ai_addr, res->ai_addrlen) == 0 ? 0 : errno;
  freeaddrinfo(res);
  if (err) {
    close(fd);
    STRATA_CHECK(
        err != EADDRINUSE, "master port ", port, " on ", addr,
        " is already in use; choose another with --master-port P or use --master-port auto");
    STRATA_FAIL("cannot bind ", addr, ":", port, ": ", std::strerror(err),
                "; check --master-addr names this machine");
  }
  return fd;
}
}  // namespace

std::string local_address_toward(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  const int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    char buf[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      const void* a =
          ss.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
      if (inet_ntop(ss.ss_family, a, buf, sizeof(buf))) out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

int64_t probe_port(const std::string& addr, int64_t port) {
  const int fd = bound_socket(addr, port);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  int64_t out = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  close(fd);
  return out;
}

c10::intrusive_ptr<c10d::Store> create_store(const WorldInfo& info,
                                             std::chrono::milliseconds timeout) {
  if (info.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  STRATA_CHECK(info.master_port != 0, "MASTER_PORT=0 with ", info.world_size,
               " ranks: only a launcher can pick a shared free port; use strata launch "
               "--master-port auto");
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(info.master_port);
  opts.isServer = info.rank == 0;
  opts.numWorkers = static_cast<size_t>(info.world_size);
  opts.waitWorkers = false;
  opts.timeout = timeout;
  // Note [store binds the master address]: TCPStore's server listens on every interface
  // by itself; rank 0 hands it a socket bound to the master address instead (loopback
  // for a local run), so nothing Strata opens is reachable beyond that interface.
  if (opts.isServer) {
    const int fd = bound_socket(info.master_addr, info.master_port);
    STRATA_CHECK(listen(fd, SOMAXCONN) == 0, "cannot listen on ", info.master_addr, ":",
                 info.master_port, ": ", std::strerror(errno));
    opts.masterListenFd = fd;
  }
  try {
    return c10::make_intrusive<c10d::TCPStore>(info.master_addr, opts);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    if (info.rank == 0 &&
        (msg.find("in use") != std::string::npos || msg.find("EADDRINUSE") != std::string::npos)) {
      STRATA_FAIL(
          "master port ", info.master_port, " on ", info.master_addr,
          " is already in use; choose another with --master-port P or use --master-port auto");
    }
    STRATA_FAIL("rendezvous at ", info.master_addr, ":", info.master_port, " failed on rank ",
                info.rank, ": ", msg,
                "; check that rank 0 is running and the address is reachable");
  }
}

}  // namespace strata
