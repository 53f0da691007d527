#include "strata/parallel/replicate.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <limits>
#include <sstream>

#include "strata/core/errors.h"
#include "strata/memory/tracking_allocator.h"

namespace strata {

namespace {

// Coalesced broadcasts move at most this much at a time (bounds the temporary copy).
constexpr int64_t kBroadcastChunkBytes = 64 << 20;

std::string describe(const std::string& name, const at::Tensor& t) {
  std::ostringstream os;
  os << name << " " << t.sizes() << " " << c10::toString(t.scalar_type());
  return os.str();
}

// Broadcasts a string from root (length, then bytes).
std::string broadcast_string(Comm& comm, const std::string& s, int64_t root) {
  at::Tensor len = at::full({1}, static_cast<int64_t>(s.size()), at::kLong);
  comm.broadcast(len, root).wait();
  at::Tensor bytes = at::zeros({len.item<int64_t>()}, at::kByte);
  if (comm.rank() == root) std::memcpy(bytes.data_ptr(), s.data(), s.size());
  comm.broadcast(bytes, root).wait();
  return std::string(static_cast<const char*>(bytes.data_ptr()),
                     static_cast<size_t>(bytes.numel()));
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

}  // namespace

void broadcast_coalesced(Comm& comm, const std::vector<at::Tensor>& tensors, int64_t root) {
  if (comm.size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  MemoryScope scope(Category::kCommBuffers);
  size_t i = 0;
  while (i < tensors.size()) {
    std::vector<at::Tensor> group{tensors[i]};
    int64_t bytes = static_cast<int64_t>(tensors[i].nbytes());
    size_t j = i + 1;
    while (j < tensors.size() && tensors[j].scalar_type() == tensors[i].scalar_type() &&
           bytes + static_cast<int64_t>(tensors[j].nbytes()) <= kBroadcastChunkBytes) {
      bytes += static_cast<int64_t>(tensors[j].nbytes());
      group.push_back(tensors[j++]);
    }
    std::vector<at::Tensor> flat;
    for (auto& t : group) flat.push_back(t.reshape({-1}));
    at::Tensor buf = at::cat(flat);
    comm.broadcast(buf, root).wait();
    int64_t off = 0;
    for (auto& t : group) {
      at::Tensor dst = t;
      dst.copy_(buf.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
    i = j;
  }
}

void broadcast_buffers(Comm& comm, torch::nn::Module& module, int64_t root) {
  if (comm.size() == 1) return;
  std::vector<at::Tensor> buffers;
  for (auto& b : module.buffers(/*recurse=*/true))
    if (b.defined()) buffers.push_back(b);
  broadcast_coalesced(comm, buffers, root);
}

void verify_same_parameters(Comm& comm, const std::vector<std::string>& names,
                            const std::vector<at::Tensor>& tensors, const std::string& who) {
  if (comm.size() == 1) return;
  std::string mine;
  std::vector<std::string> mine_lines;
  for (size_t i = 0; i < tensors.size(); ++i) {
    mine_lines.push_back(describe(names[i], tensors[i]));
    mine += mine_lines.back() + "\n";
  }
  const auto theirs = split_lines(broadcast_string(comm, mine, 0));
  int64_t first = std::numeric_limits<int64_t>::max();
  const size_t common = std::min(theirs.size(), mine_lines.size());
  for (size_t i = 0; i < common && first == std::numeric_limits<int64_t>::max(); ++i)
    if (theirs[i] != mine_lines[i]) first = static_cast<int64_t>(i);
  if (first == std::numeric_limits<int64_t>::max() && theirs.size() != mine_lines.size())
    first = static_cast<int64_t>(common);
  // Every rank learns the lowest differing index and the lowest rank that differs
  // there, so all of them fail with the same message instead of some hanging.
  const int64_t world = comm.size();
  at::Tensor code = at::full(
      {1}, first == std::numeric_limits<int64_t>::max() ? first : first * world + comm.rank(),
      at::kLong);
  comm.all_reduce(code, c10d::ReduceOp::MIN).wait();
  const int64_t c = code.item<int64_t>();
  if (c == std::numeric_limits<int64_t>::max()) return;
  const int64_t idx = c / world, bad = c % world;
  auto line = [&](const std::vector<std::string>& lines) {
    return static_cast<size_t>(idx) < lines.size()
               ? "'" + lines[static_cast<size_t>(idx)] + "'"
               : std::string("no parameter there (") + std::to_string(lines.size()) + " in all)";
  };
  const std::string bad_line = broadcast_string(comm, line(mine_lines), bad);
  STRATA_FAIL(who, ": the model differs across data-parallel ranks at parameter #", idx, ": rank ",
              comm.global_rank(0), " has ", line(theirs), ", rank ", comm.global_rank(bad), " has ",
              bad_line, "; every rank must build the same model (same model.* settings)");
}

GradReadyHooks::GradReadyHooks(const std::vector<at::Tensor>& params,
                               const std::vector<std::string>& names,
                               std::function<void(int64_t)> on_ready) {
  auto shared = std::make_shared<std::function<void(int64_t)>>(std::move(on_ready));
  for (size_t i = 0; i < params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params[i]);
    STRATA_ASSERT(acc, "no gradient accumulator for ", names[i]);
    const auto index = static_cast<int64_t>(i);
    keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [shared, index](const torch::autograd::variable_list& outputs,
                        const torch::autograd::variable_list&) {
          (*shared)(index);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

GradReadyHooks::~GradReadyHooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
}

}  // namespace strata
