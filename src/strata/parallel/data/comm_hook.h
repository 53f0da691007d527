#pragma once
#include <ATen/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/distributed/comm.h"

namespace strata {

// One bucket of gradients: a flat buffer, the gradients being views into it.
struct GradBucket {
  int64_t index = 0;
  at::Tensor buffer;              // (numel,) one dtype
  std::vector<at::Tensor> grads;  // views into buffer, in bucket order, parameter shapes
  std::vector<int64_t> params;    // parameter indices (DDP's numbering)
  std::vector<int64_t> offsets;   // element offset of each gradient in buffer
};

// The data-parallel group as a comm hook sees it: counts the bytes each collective
// sends and records when it ran, so the reducer can report compression and
// overlap. Every collective of a hook goes through here.
class HookComm {
 public:
  explicit HookComm(Comm& comm) : comm_(comm) {}
  int64_t size() const { return comm_.size(); }
  // Starts a summing all-reduce of t in place.
  CommWork all_reduce(at::Tensor& t);
  // Waits and records the collective's [start, completion] interval.
  void wait(CommWork& w);

  int64_t bytes_sent = 0;
  std::vector<
      std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>>
      intervals;

 private:
  Comm& comm_;
};

// Note [comm hooks]: how a bucket's gradients are reduced. launch() runs on the
// backward thread as soon as the bucket is ready, in bucket order on every rank (so
// the collectives of all ranks line up); it must only start communication and
// return. finish() runs once at the end of backward with every bucket of the step
// in order, and leaves in each buffer the average of the ranks' gradients (or the
// hook's approximation of it). Collectives are issued only from these two calls,
// never from a backend thread, so their order is the same on every rank.
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual void launch(GradBucket& b, HookComm& comm) = 0;
  virtual void finish(std::vector<GradBucket>& buckets, HookComm& comm) = 0;
};

// Plain average: divide, then all-reduce the buffer in place (no copy).
class AllReduceHook : public CommHook {
 public:
  std::string name() const override { return "none"; }
  void launch(GradBucket& b, HookComm& comm) override;
  void finish(std::vector<GradBucket>& buckets, HookComm& comm) override;

 private:
  std::vector<CommWork> works_;
};

// fp16 / bf16 compression: cast (already divided by the group size), all-reduce the
// half-size copy, cast back into the buffer. Halves the bytes on the wire.
class CastHook : public CommHook {
 public:
  explicit CastHook(at::ScalarType dtype) : dtype_(dtype) {}
  std::string name() const override;
  void launch(GradBucket& b, HookComm& comm) override;
  void finish(std::vector<GradBucket>& buckets, HookComm& comm) override;

 private:
  at::ScalarType dtype_;
  std::vector<std::pair<at::Tensor, CommWork>> pending_;
};

}  // namespace strata
