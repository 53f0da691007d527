#include "strata/plan/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "strata/core/errors.h"
#include "strata/core/files.h"

namespace strata {

namespace {
// Seconds of a call of `work` on a measured curve: the rate at the nearest sizes,
// interpolated in log(work); below the smallest point, that point's time (latency).
template <class Point, class Work>
double curve_seconds(const std::vector<Point>& pts, double work, Work work_of) {
  if (work <= work_of(pts.front())) return pts.front().seconds;
  if (work >= work_of(pts.back())) return work * pts.back().seconds / work_of(pts.back());
  auto hi = std::lower_bound(pts.begin(), pts.end(), work,
                             [&](const Point& p, double w) { return work_of(p) < w; });
  auto lo = hi - 1;
  const double r_lo = work_of(*lo) / lo->seconds, r_hi = work_of(*hi) / hi->seconds;
  const double w =
      (std::log(work) - std::log(work_of(*lo))) / (std::log(work_of(*hi)) - std::log(work_of(*lo)));
  return work / (r_lo + w * (r_hi - r_lo));
}
}  // namespace

double HardwareProfile::gemm_seconds(const std::string& dtype, double flops) const {
  auto it = gemm.find(dtype);
  STRATA_CHECK(it != gemm.end() && !it->second.empty(), "hardware profile ", name,
               " has no matrix-multiply rates for ", dtype, "; calibrate with that dtype");
  return curve_seconds(it->second, flops, [](const GemmPoint& p) { return p.flops; });
}

double HardwareProfile::kernel_seconds(const std::string& kernel, double work,
                                       double fallback) const {
  auto it = kernels.find(kernel);
  if (it == kernels.end() || it->second.empty()) return fallback;
  return curve_seconds(it->second, work, [](const KernelPoint& p) { return p.work; });
}

double HardwareProfile::compute_share(double ranks) const {
  const double per_core = cores > 0 ? static_cast<double>(threads) / static_cast<double>(cores) : 0;
  if (contention.empty()) return std::max(1.0, ranks * per_core);
  std::map<double, double> pts{{1.0, 1.0}};
  for (const auto& [g, x] : contention) pts[static_cast<double>(g)] = x;
  auto hi = pts.lower_bound(ranks);
  if (hi == pts.end()) {  // beyond the largest measured: grows with the oversubscription
    const auto& [g, x] = *pts.rbegin();
    return x * std::max(1.0, ranks * per_core) / std::max(1.0, g * per_core);
  }
  if (hi == pts.begin()) return hi->second;
  const auto lo = std::prev(hi);
  return lo->second + (hi->second - lo->second) * (ranks - lo->first) / (hi->first - lo->first);
}

double HardwareProfile::step_scale_for(int64_t ranks, bool tp) const {
  if (tp) {
    auto it = tp_step_scale.upper_bound(ranks);
    if (it != tp_step_scale.begin()) return std::prev(it)->second;
  }
  auto it = step_scale.upper_bound(ranks);
  return it == step_scale.begin() ? 1.0 : std::prev(it)->second;
}

double HardwareProfile::zero_collective_scale_for(int64_t ranks) const {
  auto it = zero_collective_scale.find(ranks);
  return it == zero_collective_scale.end() ? 1.0 : it->second;
}

std::optional<double> HardwareProfile::pipeline_tp_latency_scale_for(int64_t ranks) const {
  auto it = pipeline_tp_latency_scale.find(ranks);
  if (it == pipeline_tp_latency_scale.end()) return std::nullopt;
  return it->second;
}

double HardwareProfile::tp_collective_scale_for(int64_t ranks, double bytes) const {
  auto it = tp_collective_scale.find(ranks);
  if (it == tp_collective_scale.end() || it->second.empty()) return 1.0;
  const auto& pts = it->second;
  auto hi = pts.lower_bound(bytes);
  if (hi == pts.end()) return pts.rbegin()->second;
  if (hi == pts.begin()) return hi->second;
  const auto lo = std::prev(hi);
  const double t = std::log(bytes / lo->first) / std::log(hi->first / lo->first);
  return lo->second + (hi->second - lo->second) * t;
}

double HardwareProfile::compute_slowdown(double ranks, bool tp) const {
  auto at = [&](int64_t g) {
    return compute_share(static_cast<double>(g)) * step_scale_for(g, tp);
  };
  ranks = std::max(1.0, ranks);
  // Linear between the nearest measured worlds around `ranks` (Note [calibrated
  // worlds]: calibrate may skip some); beyond the largest, between whole numbers.
  // One rank counts as measured (its slowdown is the step scale alone). Read straight
  // off step_scale: this runs at every event of a pipeline's simulation.
  const auto below = static_cast<int64_t>(std::floor(ranks));
  int64_t lo_g = below, hi_g = below + 1;
  if (const auto hi = step_scale.lower_bound(static_cast<int64_t>(std::ceil(ranks)));
      hi != step_scale.end()) {
    const auto lo = step_scale.upper_bound(below);
    hi_g = hi->first;
    lo_g = lo == step_scale.begin() ? 1 : std::max<int64_t>(1, std::prev(lo)->first);
  }
  if (lo_g == hi_g || ranks == static_cast<double>(lo_g)) return at(lo_g);
  const double frac = (ranks - static_cast<double>(lo_g)) / static_cast<double>(hi_g - lo_g);
  return at(lo_g) + (at(hi_g) - at(lo_g)) * frac;
}

double HardwareProfile::peak_flops(const std::string& dtype) const {
  auto it = gemm.find(dtype);
  double best = 0;
  if (it != gemm.end())
    for (const auto& p : it->second) best = std::max(best, p.flops / p.seconds);
  return best;
}

double HardwareProfile::collective_seconds(const std::string& op, int64_t group, double bytes,
                                           int64_t span, int64_t world) const {
  if (group <= 1) return 0;
  if (world > group) {
    auto by_op = loaded_collectives.find(op);
    if (by_op != loaded_collectives.end()) {
      auto in_world = by_op->second.find(world);
      if (in_world != by_op->second.end()) {
        auto fit = in_world->second.find(group);
        if (fit != in_world->second.end()) return fit->second.seconds(bytes);
      }
    }
  }
  const double g = static_cast<double>(group);
  auto it = collectives.find(op);
  if (it != collectives.end() && !it->second.empty()) {
    const auto& fits = it->second;
    auto exact = fits.find(group);
    if (exact != fits.end()) return exact->second.seconds(bytes);
    // The nearest measured group size; a ring moves (g-1)/g of the buffer per rank.
    auto near = fits.lower_bound(group);
    if (near == fits.end()) --near;
    const double gm = static_cast<double>(near->first);
    const double scale = ((g - 1) / g) / ((gm - 1) / gm);
    return near->second.latency_s * (g - 1) / (gm - 1) + bytes * scale / near->second.bytes_per_s;
  }
  const LinkFit& link = std::max(group, span) <= ranks_per_node ? intra_node : inter_node;
  STRATA_CHECK(link.bytes_per_s > 0, "hardware profile ", name, " has no ", op,
               " measurements and no link for ", group, " ranks; calibrate with --nproc ", group);
  // Ring algorithms: all-reduce moves 2 (g-1)/g of the buffer per rank in 2 (g-1) steps,
  // all-gather and reduce-scatter half that; send/recv the buffer once.
  if (op == "send_recv") return link.seconds(bytes);
  const double passes = op == "all_reduce" ? 2 : 1;
  return passes * (g - 1) * link.latency_s + passes * (g - 1) / g * bytes / link.bytes_per_s;
}

namespace {
nlohmann::json by_ranks_json(const std::map<int64_t, double>& c) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [g, x] : c) out[std::to_string(g)] = x;
  return out;
}
// world -> [{bytes, scale}, ...], read back by read_tp_scales.
nlohmann::json tp_scale_json(const std::map<int64_t, std::map<double, double>>& c) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [g, pts] : c) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& [bytes, x] : pts) a.push_back({{"bytes", bytes}, {"scale", x}});
    out[std::to_string(g)] = a;
  }
  return out;
}
// name -> [{<size>: x, seconds: t}, ...], read back by read_curves.
template <class Point, class Size>
nlohmann::json curves_json(const std::map<std::string, std::vector<Point>>& curves,
                           const char* size, Size size_of) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, pts] : curves) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& pt : pts) a.push_back({{size, size_of(pt)}, {"seconds", pt.seconds}});
    out[name] = a;
  }
  return out;
}
}  // namespace

nlohmann::json profile_json(const HardwareProfile& p) {
  const nlohmann::json gemm =
      curves_json(p.gemm, "flops", [](const GemmPoint& pt) { return pt.flops; });
  const nlohmann::json kernels =
      curves_json(p.kernels, "work", [](const KernelPoint& pt) { return pt.work; });
  auto link = [](const LinkFit& f) {
    return nlohmann::json{{"latency_s", f.latency_s}, {"bytes_per_s", f.bytes_per_s}};
  };
  nlohmann::json coll = nlohmann::json::object();
  for (const auto& [op, fits] : p.collectives)
    for (const auto& [g, f] : fits) coll[op][std::to_string(g)] = link(f);
  nlohmann::json loaded = nlohmann::json::object();
  for (const auto& [op, worlds] : p.loaded_collectives)
    for (const auto& [w, fits] : worlds)
      for (const auto& [g, f] : fits) loaded[op][std::to_string(w)][std::to_string(g)] = link(f);
  return {{"format", 1},
          {"name", p.name},
          {"device", p.device},
          {"backend", p.backend},
          {"threads", p.threads},
          {"cores", p.cores},
          {"ranks_per_node", p.ranks_per_node},
          {"gemm", gemm},
          {"memory_bytes_per_s", p.memory_bytes_per_s},
          {"kernels", kernels},
          {"op_overhead_s", p.op_overhead_s},
          {"contention", by_ranks_json(p.contention)},
          {"step_scale", by_ranks_json(p.step_scale)},
          {"tp_step_scale", by_ranks_json(p.tp_step_scale)},
          {"tp_collective_scale", tp_scale_json(p.tp_collective_scale)},
          {"zero_collective_scale", by_ranks_json(p.zero_collective_scale)},
          {"pipeline_tp_latency_scale", by_ranks_json(p.pipeline_tp_latency_scale)},
          {"collectives", coll},
          {"loaded_collectives", loaded},
          {"intra_node", link(p.intra_node)},
          {"inter_node", link(p.inter_node)},
          {"host_to_device_bytes_per_s", p.host_to_device_bytes_per_s},
          {"device_to_host_bytes_per_s", p.device_to_host_bytes_per_s},
          {"device_memory_bytes", p.device_memory_bytes}};
}

namespace {
double positive(const nlohmann::json& j, const char* key, const std::string& where, bool required) {
  if (!j.contains(key)) {
    STRATA_CHECK(!required, where, " lacks ", key);
    return 0;
  }
  STRATA_CHECK(j[key].is_number() && j[key].get<double>() >= 0, where, ": ", key,
               " must be a number >= 0");
  return j[key].get<double>();
}
LinkFit link_from(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return {};
  return {positive(j, "latency_s", where, false), positive(j, "bytes_per_s", where, false)};
}
// A map of name -> measured points {<size>, seconds}, each positive, sorted by size.
template <class Point, class Make>
void read_curves(const nlohmann::json& j, const char* key, const char* size,
                 const std::string& where, std::map<std::string, std::vector<Point>>& out,
                 Make make) {
  if (!j.contains(key)) return;
  STRATA_CHECK(j[key].is_object(), where, ": ", key, " must map names to lists of points");
  for (const auto& [name, pts] : j[key].items()) {
    STRATA_CHECK(pts.is_array() && !pts.empty(), where, ": ", key, ".", name,
                 " must be a non-empty list of {", size, ", seconds}");
    std::vector<std::pair<double, Point>> sized;
    for (const auto& pt : pts) {
      const double x = positive(pt, size, where, true), t = positive(pt, "seconds", where, true);
      STRATA_CHECK(x > 0 && t > 0, where, ": ", key, ".", name, " has a point with zero ", size,
                   " or seconds");
      sized.push_back({x, make(x, t)});
    }
    std::sort(sized.begin(), sized.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    auto& curve = out[name];
    for (const auto& [x, q] : sized) curve.push_back(q);
  }
}
int64_t rank_count(const std::string& key, const std::string& where) {
  char* end = nullptr;
  const long long g = std::strtoll(key.c_str(), &end, 10);
  STRATA_CHECK(end && *end == 0 && g >= 1, where, ": '", key, "' is not a rank count");
  return g;
}
// A map of rank count -> factor (at least `least`), by_ranks_json's.
void read_factors(const nlohmann::json& j, const char* key, double least, const std::string& where,
                  std::map<int64_t, double>& out) {
  if (!j.contains(key)) return;
  for (const auto& [g, x] : j[key].items()) {
    STRATA_CHECK(x.is_number() && x.get<double>() >= least, where, ": ", key, ".", g,
                 " must be a number >= ", least);
    out[rank_count(g, where)] = x.get<double>();
  }
}
// tp_scale_json's: each factor at least kLeastTpCollectiveScale, each size positive.
void read_tp_scales(const nlohmann::json& j, const std::string& where,
                    std::map<int64_t, std::map<double, double>>& out) {
  if (!j.contains("tp_collective_scale")) return;
  for (const auto& [g, pts] : j["tp_collective_scale"].items()) {
    STRATA_CHECK(pts.is_array(), where, ": tp_collective_scale.", g,
                 " must be a list of {bytes, scale}");
    for (const auto& pt : pts) {
      const bool ok = pt.is_object() && pt.contains("bytes") && pt["bytes"].is_number() &&
                      pt["bytes"].get<double>() > 0 && pt.contains("scale") &&
                      pt["scale"].is_number() &&
                      pt["scale"].get<double>() >= kLeastTpCollectiveScale;
      STRATA_CHECK(ok, where, ": tp_collective_scale.", g,
                   " needs bytes > 0 and scale >= ", kLeastTpCollectiveScale, " in each point");
      out[rank_count(g, where)][pt["bytes"].get<double>()] = pt["scale"].get<double>();
    }
  }
}
// group size -> {latency_s, bytes_per_s} at `path` (for errors), profile_json's.
void read_group_fits(const nlohmann::json& fits, const std::string& path, const std::string& where,
                     std::map<int64_t, LinkFit>& out) {
  STRATA_CHECK(fits.is_object(), where, ": ", path, " must map group sizes to fits");
  for (const auto& [g, f] : fits.items()) {
    const LinkFit fit = link_from(f, where);
    STRATA_CHECK(fit.bytes_per_s > 0, where, ": ", path, ".", g, " needs bytes_per_s > 0");
    out[rank_count(g, where)] = fit;
  }
}
// op -> group size -> fit.
void read_fits(const nlohmann::json& j, const char* key, const std::string& where,
               std::map<std::string, std::map<int64_t, LinkFit>>& out) {
  if (!j.contains(key)) return;
  STRATA_CHECK(j[key].is_object(), where, ": ", key, " must map ops to group sizes");
  for (const auto& [op, fits] : j[key].items())
    read_group_fits(fits, std::string(key) + "." + op, where, out[op]);
}
// op -> world -> group size -> fit.
void read_loaded_fits(const nlohmann::json& j, const char* key, const std::string& where,
                      std::map<std::string, std::map<int64_t, std::map<int64_t, LinkFit>>>& out) {
  if (!j.contains(key)) return;
  STRATA_CHECK(j[key].is_object(), where, ": ", key, " must map ops to world sizes");
  for (const auto& [op, worlds] : j[key].items()) {
    STRATA_CHECK(worlds.is_object(), where, ": ", key, ".", op, " must map world sizes to groups");
    for (const auto& [w, fits] : worlds.items())
      read_group_fits(fits, std::string(key) + "." + op + "." + w, where,
                      out[op][rank_count(w, where)]);
  }
}
}  // namespace

HardwareProfile profile_from_json(const nlohmann::json& j, const std::string& where) {
  STRATA_CHECK(j.is_object() && j.value("format", 0) == 1, where,
               " is not a Strata hardware profile (format 1); write it with strata calibrate");
  HardwareProfile p;
  p.name = j.value("name", "");
  p.device = j.value("device", "cpu");
  p.backend = j.value("backend", "gloo");
  p.threads = j.value("threads", int64_t{1});
  p.cores = j.value("cores", int64_t{0});
  p.ranks_per_node = j.value("ranks_per_node", int64_t{1});
  read_curves(j, "gemm", "flops", where, p.gemm, [](double x, double t) {
    return GemmPoint{x, t};
  });
  p.memory_bytes_per_s = positive(j, "memory_bytes_per_s", where, false);
  read_curves(j, "kernels", "work", where, p.kernels, [](double x, double t) {
    return KernelPoint{x, t};
  });
  p.op_overhead_s = positive(j, "op_overhead_s", where, false);
  read_factors(j, "contention", 1.0, where, p.contention);  // a slowdown
  read_factors(j, "step_scale", 0.5, where,
               p.step_scale);  // calibrate's floor (Note [step calibration])
  read_factors(j, "tp_step_scale", 0.5, where, p.tp_step_scale);
  read_tp_scales(j, where, p.tp_collective_scale);
  read_factors(j, "zero_collective_scale", kLeastZeroCollectiveScale, where,
               p.zero_collective_scale);
  read_factors(j, "pipeline_tp_latency_scale", kLeastTpCollectiveScale, where,
               p.pipeline_tp_latency_scale);
  read_fits(j, "collectives", where, p.collectives);
  read_loaded_fits(j, "loaded_collectives", where, p.loaded_collectives);
  p.intra_node = link_from(j.value("intra_node", nlohmann::json()), where);
  p.inter_node = link_from(j.value("inter_node", nlohmann::json()), where);
  p.host_to_device_bytes_per_s = positive(j, "host_to_device_bytes_per_s", where, false);
  p.device_to_host_bytes_per_s = positive(j, "device_to_host_bytes_per_s", where, false);
  p.device_memory_bytes = positive(j, "device_memory_bytes", where, false);
  STRATA_CHECK(!p.gemm.empty(), where, " has no gemm rates; the cost model needs them");
  return p;
}

HardwareProfile load_profile(const std::string& path) {
  const auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  STRATA_CHECK(!j.is_discarded(), path, " is not JSON; give a profile from strata calibrate");
  return profile_from_json(j, path);
}

std::string default_profile_path(int64_t threads) {
  char host[256] = "machine";
  gethostname(host, sizeof(host) - 1);
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/strata/profiles/" + host + "-" +
         std::to_string(threads) + "t.json";
}

std::string profile_threads_mismatch(const HardwareProfile& hw, int64_t threads) {
  if (hw.device != "cpu" || hw.threads == threads) return {};
  return c10::str("the profile was calibrated at ", hw.threads, " thread(s) per rank, but these ",
                  "ranks run ", threads, ", so its times do not hold for them; calibrate with ",
                  "this --nproc (or set --training.threads=", hw.threads, ")");
}

LinkFit fit_link(const std::vector<std::pair<double, double>>& samples) {
  STRATA_CHECK(samples.size() >= 2, "a link fit needs at least two sizes");
  // Least squares of the relative error (weights 1 / t^2), so that the small sizes,
  // which fix the latency, count as much as the large ones, which fix the bandwidth.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : samples) {
    const double w = 1.0 / std::max(y * y, 1e-30);
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);  // seconds per byte
  double alpha = (sy - slope * sx) / sw;
  if (alpha < 0) {  // through the origin instead
    alpha = 0;
    slope = sxy / sxx;
  }
  slope = std::max(slope, 1e-15);
  return {alpha, 1.0 / slope};
}

}  // namespace strata
