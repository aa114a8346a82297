// ggml's tensor types, as GGUF files store them, and their conversion to
// float32 (kernels/ggml_dequant.h, where the CPU backend also finds it).
#ifndef FLOVER_MODEL_LOADER_GGUF_QUANTS_H_
#define FLOVER_MODEL_LOADER_GGUF_QUANTS_H_

#include <cstdint>
#include <string>

#include "kernels/ggml_dequant.h"
#include "kernels/ggml_types.h"

namespace flover {

// The types' one table lives in kernels/ggml_types.h.
using kernels::GgmlType;
using kernels::GgmlTypeInfo;
using kernels::GgmlTypeOf;

// A type's name, or "type N" for an unknown id.
std::string GgmlTypeName(uint32_t type);

using kernels::GgmlDequantize;

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_GGUF_QUANTS_H_
