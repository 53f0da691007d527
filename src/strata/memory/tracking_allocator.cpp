#include "strata/memory/tracking_allocator.h"

#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace strata {

const char* category_name(Category c) {
  switch (c) {
    case Category::kParameters:
      return "parameters";
    case Category::kGradients:
      return "gradients";
    case Category::kOptimizer:
      return "optimizer";
    case Category::kActivations:
      return "activations";
    case Category::kCommBuffers:
      return "comm_buffers";
    case Category::kOther:
      return "other";
    default:
      return "?";
  }
}

namespace {

// Note [allocation header]: each allocation's size and category live in a table
// keyed by its address, not in a header in front of the data: padding the block by a
// header pushed tensors of exactly 32 MiB (e.g. the logits of batch 4 x 256 tokens x
// 8192) past glibc's largest mmap threshold, so every step mapped fresh, kernel-zeroed
// pages for them (12% of a gpt2-124m step in clear_page, against 6% untracked). The
// DataPtr's context must stay the data pointer (c10's raw_allocate asserts it).
struct Header {
  size_t size;
  int category;
};

thread_local int t_category = -1;
std::atomic<int> g_category{static_cast<int>(Category::kOther)};
std::atomic<bool> g_installed{false};
thread_local bool t_is_main = false;

struct Counters {
  std::mutex mu;
  MemoryStats s;
  std::unordered_map<void*, Header> blocks;
  void add(void* data, int c, int64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    if (data) blocks[data] = Header{static_cast<size_t>(n), c};
    s.current[c] += n;
    s.total += n;
    if (s.current[c] > s.peak[c]) s.peak[c] = s.current[c];
    if (s.total > s.total_peak) {
      s.total_peak = s.total;
      s.at_total_peak = s.current;
    }
  }
};
Counters& counters() {
  static Counters* c = new Counters();  // never destroyed: frees may come during exit
  return *c;
}

void tracked_delete(void* data) {
  if (!data) return;
  auto& c = counters();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.blocks.find(data);
    if (it != c.blocks.end()) {
      c.s.current[it->second.category] -= static_cast<int64_t>(it->second.size);
      c.s.total -= static_cast<int64_t>(it->second.size);
      c.blocks.erase(it);
    }
  }
  c10::free_cpu(data);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* data = c10::alloc_cpu(n);
    const int category = static_cast<int>(current_category());
    counters().add(data, category, static_cast<int64_t>(n));
    return {data, data, &tracked_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// The data pointer of a tensor's storage when the tracking allocator made it.
void* tracked_data(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.device().type() != c10::DeviceType::CPU) return nullptr;
  const auto& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &tracked_delete || !dp.get()) return nullptr;
  return dp.get();
}

}  // namespace

void install_tracking_allocator() {
  if (g_installed.exchange(true)) return;
  static TrackingAllocator alloc;
  t_is_main = true;
  c10::SetCPUAllocator(&alloc, /*priority=*/100);
}

bool tracking_allocator_installed() {
  return g_installed.load();
}

MemoryScope::MemoryScope(Category c) : prev_(t_category), main_(t_is_main) {
  t_category = static_cast<int>(c);
  if (main_) g_category.store(t_category);
}

MemoryScope::~MemoryScope() {
  t_category = prev_;
  if (main_) g_category.store(prev_ < 0 ? static_cast<int>(Category::kOther) : prev_);
}

// Note [unscoped threads]: a thread without a scope inside a parallel region is
// an intra-op worker allocating on behalf of the main thread, so it takes the
// main thread's scope. Any other unscoped thread is a communication backend's
// worker (Gloo's, which stages all-gathers and reductions in tensors of its own):
// its allocations are communication buffers, whatever the main thread is doing
// at that moment. Strata starts no other threads that allocate tensors.
Category current_category() {
  if (t_category >= 0) return static_cast<Category>(t_category);
  if (t_is_main || at::in_parallel_region()) return static_cast<Category>(g_category.load());
  return Category::kCommBuffers;
}

MemoryStats memory_stats() {
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.s;
}

void reset_memory_peaks() {
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  c.s.peak = c.s.current;
  c.s.total_peak = c.s.total;
  c.s.at_total_peak = c.s.current;
}

void retag(const at::Tensor& t, Category c) {
  void* data = tracked_data(t);
  if (!data) return;
  auto& k = counters();
  std::lock_guard<std::mutex> lock(k.mu);
  auto it = k.blocks.find(data);
  if (it == k.blocks.end() || it->second.category == static_cast<int>(c)) return;
  const auto n = static_cast<int64_t>(it->second.size);
  const int to = static_cast<int>(c);
  k.s.current[it->second.category] -= n;
  k.s.current[to] += n;
  if (k.s.current[to] > k.s.peak[to]) k.s.peak[to] = k.s.current[to];
  it->second.category = to;
}

Category category_of(const at::Tensor& t) {
  void* data = tracked_data(t);
  if (!data) return Category::kOther;
  auto& k = counters();
  std::lock_guard<std::mutex> lock(k.mu);
  auto it = k.blocks.find(data);
  return it == k.blocks.end() ? Category::kOther : static_cast<Category>(it->second.category);
}

}  // namespace strata
