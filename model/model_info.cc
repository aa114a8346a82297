#include "model/model_info.h"

#include <algorithm>

namespace flover {

bool ModelInfo::IsEos(int32_t token) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

}  // namespace flover
