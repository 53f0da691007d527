#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "strata/core/state.h"
#include "strata/distributed/comm.h"
#include "strata/train/faults.h"

namespace strata {

// Note [async checkpoint]: with checkpoint.async the step only copies this rank's
// pieces to host memory (pinned on CUDA) and returns; a background thread writes and
// checksums them into step-N.tmp/ and reports to the store. Rank 0's thread waits
// until every rank has reported, then writes meta.json, renames the folder into place
// and moves `latest`, so a crash at any moment leaves `latest` on the previous
// complete checkpoint. No collective runs off the training thread (the store is the
// only channel), and the next save waits for the previous one: at most one is in
// flight, and its host copy is the extra memory.
class Checkpointer {
 public:
  struct Options {
    std::string root;  // checkpoint.dir
    int64_t keep = 2;
    bool async = false;
    int64_t rank = 0, world_size = 1;
    std::chrono::milliseconds timeout{60000};
    std::optional<Fault> fault;  // kill-in-write (Note [fault injection])
  };
  Checkpointer(Options o, Comm& world, c10::intrusive_ptr<c10d::Store> store);
  ~Checkpointer();
  // Saves step: every component's pieces; rank 0 writes meta. Returns what the step
  // paid: {ms (the stall), async, ...}.
  nlohmann::json save(int64_t step, const std::vector<Stateful*>& components,
                      const nlohmann::json& meta);
  // A background write finished since the last call: {step, write_ms, bytes}.
  std::optional<nlohmann::json> take_written();
  // Waits for the background write, if any; a failure there is raised here.
  void wait();

 private:
  std::string tmp_dir(int64_t step) const;  // where step's files go until renamed
  void write(int64_t step, const std::vector<TensorPiece>& pieces);
  Options o_;
  Comm& world_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::thread writer_;
  std::mutex mu_;
  std::optional<nlohmann::json> written_;
  std::string error_;
};

}  // namespace strata
