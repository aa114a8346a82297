// A TokenSink that records everything, for engine tests.
#ifndef FLOVER_ENGINE_TESTING_COLLECTING_SINK_H_
#define FLOVER_ENGINE_TESTING_COLLECTING_SINK_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/request.h"

namespace flover::testing {

class CollectingSink : public TokenSink {
 public:
  void OnToken(RequestId, const TokenEvent& e) override {
    std::function<void()> action;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tokens_.push_back(e.token);
      text_ += e.text;
      logprobs_.push_back(e.logprob);
      top_logprobs_.push_back(e.top_logprobs);
      if (tokens_.size() == at_token_) action = std::move(at_action_);
    }
    if (action) action();
  }
  // Runs `action` on the engine's thread as the `n`-th token arrives, before
  // the engine plans its next step: a test cancels a request or moves a
  // clock at a step of its choosing, by construction rather than by timing.
  void AtToken(size_t n, std::function<void()> action) {
    std::lock_guard<std::mutex> lock(mu_);
    at_token_ = n;
    at_action_ = std::move(action);
  }
  void OnFinish(RequestId, const FinishEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++finishes_;
    finish_ = e;
    text_ += e.text;
    cv_.notify_all();
  }
  // Waits for the finish event; false on timeout.
  bool Wait(absl::Duration timeout = absl::Seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return finishes_ > 0; });
  }
  std::vector<int32_t> tokens() const { std::lock_guard<std::mutex> l(mu_); return tokens_; }
  std::string text() const { std::lock_guard<std::mutex> l(mu_); return text_; }
  std::vector<float> logprobs() const { std::lock_guard<std::mutex> l(mu_); return logprobs_; }
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs() const {
    std::lock_guard<std::mutex> l(mu_);
    return top_logprobs_;
  }
  FinishEvent finish() const { std::lock_guard<std::mutex> l(mu_); return *finish_; }
  int finishes() const { std::lock_guard<std::mutex> l(mu_); return finishes_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  std::vector<float> logprobs_;
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs_;
  std::string text_;
  int finishes_ = 0;
  std::optional<FinishEvent> finish_;
  size_t at_token_ = 0;
  std::function<void()> at_action_;
};

}  // namespace flover::testing

#endif  // FLOVER_ENGINE_TESTING_COLLECTING_SINK_H_
