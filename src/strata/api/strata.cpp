#include "strata/api/strata.h"

#include <c10/util/Exception.h>

#include <cstdio>

#include "strata/train/trainer.h"

namespace strata {

Config parse_config(int argc, char** argv, const Config& defaults, std::vector<std::string>* rest) {
  std::string path;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-c" || a == "--config") {
      STRATA_CHECK(i + 1 < argc, a, " needs a file: ", a, " FILE.toml");
      path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      path = a.substr(9);
    } else if (a.rfind("--", 0) == 0 && a.find('.') != std::string::npos &&
               a.find('=') != std::string::npos) {
      overrides.push_back(a);
    } else {
      STRATA_CHECK(rest, "unknown argument '", a,
                   "'; give -c FILE.toml and --section.key=value settings");
      rest->push_back(a);
    }
  }
  Config cfg = defaults;
  apply_config_args(cfg, path, overrides, argc > 0 ? argv[0] : "program");
  return cfg;
}

WorldInfo init_from_env() {
  return world_from_env();
}

std::unique_ptr<Mesh> make_mesh(const WorldInfo& world, const Config& cfg) {
  validate_config(cfg);
  const auto& p = cfg.parallel;
  const auto device = cfg.training.device == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  return std::make_unique<Mesh>(world, ParallelDims(p.dp, p.tp, p.pp, world.world_size), device,
                                std::chrono::milliseconds(static_cast<int64_t>(p.timeout_s * 1e3)));
}

TrainResult train(const Config& cfg, const WorldInfo& world, const UserModel& model,
                  const UserData& data) {
  STRATA_CHECK(model.build, "UserModel ", model.name,
               " has no build function; give one that returns the rank's part");
  STRATA_CHECK(data.train, "UserData has no training dataset; give UserData::train");
  Trainer::Extensions ext;
  ModelSpec spec;
  spec.flavour = model.name;
  spec.family = Family::kCustom;
  spec.n_layer = model.blocks;
  spec.build = model.build;
  spec.activation_shape = model.activation_shape;
  ext.model = spec;
  DataSource src;
  src.train = data.train;
  src.eval = data.eval;
  src.description = data.description;
  ext.data = src;
  Trainer trainer(cfg, world, std::move(ext));
  TrainSummary s = trainer.run();
  return {s.losses, s.first_step, s.eval_loss, s.metrics_path, s.checkpoint_dir};
}

int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const CommError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    std::fprintf(stderr, "error: %s\n", msg.substr(0, msg.find('\n')).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace strata
