// The launcher and the mesh from a program of one's own: each rank sums its rank + 1
// over the world and over its tp group, and prints what it got and where it sits.
#include <strata/api/strata.h>

#include <cstdio>

int main(int argc, char** argv) {
  return strata::run_main([&] {
    const strata::Config cfg = strata::parse_config(argc, argv);
    const strata::WorldInfo world = strata::init_from_env();
    auto mesh = strata::make_mesh(world, cfg);
    at::Tensor all = at::full({1}, static_cast<double>(world.rank + 1), at::kDouble);
    at::Tensor tp = all.clone();
    mesh->comm(strata::Axis::kWorld).all_reduce(all).wait();
    mesh->comm(strata::Axis::kTp).all_reduce(tp).wait();
    const strata::Coord c = mesh->coord();
    std::printf("rank %lld of %lld: dp %lld tp %lld pp %lld, world sum %g, tp sum %g (%s)\n",
                static_cast<long long>(world.rank), static_cast<long long>(world.world_size),
                static_cast<long long>(c.dp), static_cast<long long>(c.tp),
                static_cast<long long>(c.pp), all.item<double>(), tp.item<double>(),
                mesh->comm(strata::Axis::kWorld).backend().c_str());
    return 0;
  });
}
