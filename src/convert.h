// GGUF -> Sparrow bundle conversion (formats/bundle.h describes the file).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "formats/bundle.h"
#include "formats/tensor_type.h"

namespace sparrow {

struct ConvertOptions {
  TensorType record_type = TensorType::kF32;  // f32, f16, q8_0, q4_0
  bundle::Layout layout = bundle::Layout::kNeuron;
  bool force = false;  // overwrite an existing output
};

// Reads the GGUF tensor by tensor (memory bounded by one FFN matrix in f32),
// writes the bundle through a temporary file renamed at the end.
// progress(done, total) counts bytes of output. InputError for a model
// Sparrow cannot run, an unsupported record type, or an existing output
// without force.
void ConvertGgufToBundle(const std::string& gguf_path,
                         const std::string& bundle_path,
                         const ConvertOptions& options,
                         const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace sparrow
