#include "src/runtime/unit_policy.h"

#include <numeric>

namespace sparrow {

void DensePolicy::Select(const bundle::UnitGroup& group, const float*, size_t,
                         size_t, std::vector<uint32_t>* units) {
  units->resize(group.n_units);
  std::iota(units->begin(), units->end(), 0u);
}

}  // namespace sparrow
