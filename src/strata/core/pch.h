// Precompiled header: libtorch and the standard library (see Note [precompiled header]).
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
