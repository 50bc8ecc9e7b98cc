// The "which units does this token need" hook. A policy looks at the input
// of a unit group (x for neuron and dip-input records, the GLU output h for
// dip-output records) and lists the units to use. It never reads files or
// allocates from the budget; pruning policies (DIP, predictors) plug in
// here without touching the cache or the loaders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/bundle.h"

namespace sparrow {

class UnitPolicy {
 public:
  virtual ~UnitPolicy() = default;
  // `input` holds n_tokens rows of `input_dim` floats. Writes the sorted,
  // distinct units of `group` that any of the tokens needs.
  virtual void Select(const bundle::UnitGroup& group, const float* input,
                      size_t n_tokens, size_t input_dim,
                      std::vector<uint32_t>* units) = 0;
  virtual std::string name() const = 0;
};

// Every unit, every token (density 1.0).
class DensePolicy : public UnitPolicy {
 public:
  void Select(const bundle::UnitGroup& group, const float* input,
              size_t n_tokens, size_t input_dim,
              std::vector<uint32_t>* units) override;
  std::string name() const override { return "dense"; }
};

}  // namespace sparrow
