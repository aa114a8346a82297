// A clock that moves only when a test moves it (EngineOptions::clock), so
// deadlines and batching windows fire at a step the test chooses.
#ifndef FLOVER_ENGINE_TESTING_MANUAL_CLOCK_H_
#define FLOVER_ENGINE_TESTING_MANUAL_CLOCK_H_

#include <functional>
#include <mutex>

#include "absl/time/time.h"

namespace flover::testing {

class ManualClock {
 public:
  absl::Time Now() const {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }
  // For EngineOptions::clock; the clock must outlive the engine.
  std::function<absl::Time()> AsFunction() const {
    return [this] { return Now(); };
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
};

}  // namespace flover::testing

#endif  // FLOVER_ENGINE_TESTING_MANUAL_CLOCK_H_
