#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace strata {

// Who this process is, read from the launcher's environment.
struct WorldInfo {
  int64_t rank = 0;
  int64_t local_rank = 0;
  int64_t world_size = 1;
  int64_t local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  std::string source = "single";  // torchrun (strata launch), openmpi, slurm, single
};

// torchrun variables first (RANK, WORLD_SIZE, LOCAL_RANK, ...), then OpenMPI
// (OMPI_COMM_WORLD_*), then Slurm (SLURM_PROCID, SLURM_NTASKS, ...); none: one process.
WorldInfo world_from_env();

// The c10d store every rank meets at: a TCPStore served by rank 0 on
// MASTER_ADDR:MASTER_PORT, or an in-process HashStore for a single process.
// A port already in use is a one-line user error.
c10::intrusive_ptr<c10d::Store> create_store(const WorldInfo& info,
                                             std::chrono::milliseconds timeout);

// This machine's address on the interface that routes to `addr` (a UDP socket's
// source address after connect; nothing is sent), "" if there is no route. Gloo binds
// it, so peers reach each rank where the master address does, and nothing else.
std::string local_address_toward(const std::string& addr);

// Binds a TCP socket to addr:port (port 0: any free port) and returns the port;
// a port in use is a user error. The socket is closed again.
int64_t probe_port(const std::string& addr, int64_t port);

}  // namespace strata
