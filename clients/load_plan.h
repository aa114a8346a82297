// The load client's arithmetic, apart from its I/O so it can be tested:
// arrival times (Poisson, or gamma-distributed gaps with a burstiness as
// vLLM's benchmark_serving draws them) and whether a request met its
// service-level objectives (for goodput).
#ifndef FLOVER_CLIENTS_LOAD_PLAN_H_
#define FLOVER_CLIENTS_LOAD_PLAN_H_

#include <random>
#include <vector>

namespace flover::clients {

// Send times (seconds from the start) of requests at `rate` requests/s: the
// first at 0, then gaps drawn from a gamma distribution of shape
// `burstiness` and mean 1/rate. burstiness 1 is a Poisson process
// (exponential gaps); below 1 arrivals come in bursts, above 1 they are
// more even. rate <= 0 means all at once (every offset 0, nothing drawn).
class Arrivals {
 public:
  Arrivals(double rate, double burstiness);
  // The next request's offset; draws one gap from `rng` after the first.
  double Next(std::mt19937_64& rng);

 private:
  double rate_, burstiness_;
  std::exponential_distribution<double> exponential_;
  std::gamma_distribution<double> gamma_;
  double t_ = 0;
  bool first_ = true;
};

// The first `n` offsets of Arrivals(rate, burstiness).
std::vector<double> ArrivalOffsets(int n, double rate, double burstiness, std::mt19937_64& rng);

// Service-level objectives in seconds; 0 leaves one out.
struct Slo {
  double ttft_s = 0;
  double tpot_s = 0;
  double e2e_s = 0;
  bool any() const { return ttft_s > 0 || tpot_s > 0 || e2e_s > 0; }
};

// A completed request's latencies, in seconds. `tokens` is how many it
// generated; TPOT is (e2e - ttft) / (tokens - 1), and a request of one token
// has no TPOT to miss.
bool MeetsSlo(const Slo& slo, double ttft_s, double e2e_s, int tokens);

}  // namespace flover::clients

#endif  // FLOVER_CLIENTS_LOAD_PLAN_H_
