#include "strata/memory/tracking_allocator.h"

#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <mutex>

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

constexpr size_t kHeader = 64;  // keeps the data 64-byte aligned
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
  void add(int c, int64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    s.current[c] += n;
    s.total += n;
    if (s.current[c] > s.peak[c]) s.peak[c] = s.current[c];
    if (s.total > s.total_peak) {
      s.total_peak = s.total;
      s.at_total_peak = s.current;
    }
  }
  void sub(int c, int64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    s.current[c] -= n;
    s.total -= n;
  }
  void move(int from, int to, int64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    s.current[from] -= n;
    s.current[to] += n;
    if (s.current[to] > s.peak[to]) s.peak[to] = s.current[to];
  }
};
Counters& counters() {
  static Counters* c = new Counters();  // never destroyed: frees may come during exit
  return *c;
}

void tracked_delete(void* data) {
  if (!data) return;
  char* base = static_cast<char*>(data) - kHeader;
  auto* h = reinterpret_cast<Header*>(base);
  counters().sub(h->category, static_cast<int64_t>(h->size));
  c10::free_cpu(base);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    auto* h = reinterpret_cast<Header*>(base);
    h->size = n;
    h->category = static_cast<int>(current_category());
    counters().add(h->category, static_cast<int64_t>(n));
    void* data = base + kHeader;
    return {data, data, &tracked_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

Header* header_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.device().type() != c10::DeviceType::CPU) return nullptr;
  const auto& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &tracked_delete || !dp.get()) return nullptr;
  return reinterpret_cast<Header*>(static_cast<char*>(dp.get_context()) - kHeader);
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
  Header* h = header_of(t);
  if (!h || h->category == static_cast<int>(c)) return;
  counters().move(h->category, static_cast<int>(c), static_cast<int64_t>(h->size));
  h->category = static_cast<int>(c);
}

Category category_of(const at::Tensor& t) {
  Header* h = header_of(t);
  return h ? static_cast<Category>(h->category) : Category::kOther;
}

}  // namespace strata
