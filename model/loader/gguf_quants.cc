#include "model/loader/gguf_quants.h"

#include "absl/strings/str_cat.h"

namespace flover {

std::string GgmlTypeName(uint32_t type) {
  const GgmlTypeInfo* t = GgmlTypeOf(type);
  return t != nullptr ? std::string(t->name) : absl::StrCat("type ", type);
}

}  // namespace flover
