#include "strata/plan/profile.h"

#include <algorithm>
#include <cmath>

#include "strata/core/errors.h"
#include "strata/core/files.h"

namespace strata {

double HardwareProfile::gemm_seconds(const std::string& dtype, double flops) const {
  auto it = gemm.find(dtype);
  STRATA_CHECK(it != gemm.end() && !it->second.empty(), "hardware profile ", name,
               " has no matrix-multiply rates for ", dtype, "; calibrate with that dtype");
  const auto& pts = it->second;  // sorted by flops
  if (flops <= pts.front().flops) return pts.front().seconds;
  if (flops >= pts.back().flops) return flops * pts.back().seconds / pts.back().flops;
  auto hi = std::lower_bound(pts.begin(), pts.end(), flops,
                             [](const GemmPoint& p, double f) { return p.flops < f; });
  auto lo = hi - 1;
  // Rate (FLOP/s) interpolated in log(flops).
  const double r_lo = lo->flops / lo->seconds, r_hi = hi->flops / hi->seconds;
  const double w =
      (std::log(flops) - std::log(lo->flops)) / (std::log(hi->flops) - std::log(lo->flops));
  return flops / (r_lo + w * (r_hi - r_lo));
}

double HardwareProfile::peak_flops(const std::string& dtype) const {
  auto it = gemm.find(dtype);
  double best = 0;
  if (it != gemm.end())
    for (const auto& p : it->second) best = std::max(best, p.flops / p.seconds);
  return best;
}

double HardwareProfile::collective_seconds(const std::string& op, int64_t group,
                                           double bytes) const {
  if (group <= 1) return 0;
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
  const LinkFit& link = group <= ranks_per_node ? intra_node : inter_node;
  STRATA_CHECK(link.bytes_per_s > 0, "hardware profile ", name, " has no ", op,
               " measurements and no link for ", group, " ranks; calibrate with --nproc ", group);
  // Ring algorithms: all-reduce moves 2 (g-1)/g of the buffer per rank in 2 (g-1) steps,
  // all-gather and reduce-scatter half that; send/recv the buffer once.
  if (op == "send_recv") return link.seconds(bytes);
  const double passes = op == "all_reduce" ? 2 : 1;
  return passes * (g - 1) * link.latency_s + passes * (g - 1) / g * bytes / link.bytes_per_s;
}

nlohmann::json profile_json(const HardwareProfile& p) {
  nlohmann::json gemm = nlohmann::json::object();
  for (const auto& [dtype, pts] : p.gemm) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& pt : pts) a.push_back({{"flops", pt.flops}, {"seconds", pt.seconds}});
    gemm[dtype] = a;
  }
  nlohmann::json coll = nlohmann::json::object();
  for (const auto& [op, fits] : p.collectives)
    for (const auto& [g, f] : fits)
      coll[op][std::to_string(g)] = {{"latency_s", f.latency_s}, {"bytes_per_s", f.bytes_per_s}};
  auto link = [](const LinkFit& f) {
    return nlohmann::json{{"latency_s", f.latency_s}, {"bytes_per_s", f.bytes_per_s}};
  };
  return {{"format", 1},
          {"name", p.name},
          {"device", p.device},
          {"backend", p.backend},
          {"threads", p.threads},
          {"cores", p.cores},
          {"ranks_per_node", p.ranks_per_node},
          {"gemm", gemm},
          {"memory_bytes_per_s", p.memory_bytes_per_s},
          {"collectives", coll},
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
  if (j.contains("gemm")) {
    STRATA_CHECK(j["gemm"].is_object(), where, ": gemm must map dtypes to lists of points");
    for (const auto& [dtype, pts] : j["gemm"].items()) {
      STRATA_CHECK(pts.is_array() && !pts.empty(), where, ": gemm.", dtype,
                   " must be a non-empty list of {flops, seconds}");
      auto& out = p.gemm[dtype];
      for (const auto& pt : pts) {
        const GemmPoint g{positive(pt, "flops", where, true), positive(pt, "seconds", where, true)};
        STRATA_CHECK(g.flops > 0 && g.seconds > 0, where, ": gemm.", dtype,
                     " has a point with zero flops or seconds");
        out.push_back(g);
      }
      std::sort(out.begin(), out.end(),
                [](const GemmPoint& a, const GemmPoint& b) { return a.flops < b.flops; });
    }
  }
  p.memory_bytes_per_s = positive(j, "memory_bytes_per_s", where, false);
  if (j.contains("collectives"))
    for (const auto& [op, fits] : j["collectives"].items())
      for (const auto& [g, f] : fits.items()) {
        const LinkFit fit = link_from(f, where);
        STRATA_CHECK(fit.bytes_per_s > 0, where, ": collectives.", op, ".", g,
                     " needs bytes_per_s > 0");
        p.collectives[op][std::stoll(g)] = fit;
      }
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

LinkFit fit_link(const std::vector<std::pair<double, double>>& samples) {
  STRATA_CHECK(samples.size() >= 2, "a link fit needs at least two sizes");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const auto n = static_cast<double>(samples.size());
  for (const auto& [x, y] : samples) {
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);  // seconds per byte
  double alpha = (sy - slope * sx) / n;
  if (alpha < 0) {  // through the origin instead
    alpha = 0;
    slope = sxy / sxx;
  }
  slope = std::max(slope, 1e-15);
  return {alpha, 1.0 / slope};
}

}  // namespace strata
