// Whether a test may skip a device it cannot create. On a GPU host a
// missing module or driver must fail the run, not skip quietly:
// FLOVER_REQUIRE_DEVICES=cuda (a comma-separated list; the GPU bundle's
// run_gpu_checks.sh sets it) turns those skips into failures.
#ifndef FLOVER_KERNELS_TESTING_REQUIRED_DEVICES_H_
#define FLOVER_KERNELS_TESTING_REQUIRED_DEVICES_H_

#include <cstdlib>
#include <sstream>
#include <string>

namespace flover::testing {

inline bool DeviceRequired(const std::string& device) {
  const char* env = std::getenv("FLOVER_REQUIRE_DEVICES");
  if (env == nullptr) return false;
  std::stringstream list(env);
  for (std::string d; std::getline(list, d, ',');) {
    if (d == device || (d == "cuda" && device.rfind("cuda:", 0) == 0)) return true;
  }
  return false;
}

}  // namespace flover::testing

#endif  // FLOVER_KERNELS_TESTING_REQUIRED_DEVICES_H_
