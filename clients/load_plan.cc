#include "clients/load_plan.h"

namespace flover::clients {

Arrivals::Arrivals(double rate, double burstiness)
    : rate_(rate),
      burstiness_(burstiness),
      exponential_(rate > 0 ? rate : 1.0),
      gamma_(burstiness > 0 ? burstiness : 1.0, rate > 0 && burstiness > 0 ? 1.0 / (rate * burstiness) : 1.0) {}

double Arrivals::Next(std::mt19937_64& rng) {
  if (first_ || rate_ <= 0) {
    first_ = false;
    return t_;
  }
  // Shape 1 is the exponential distribution; drawn as such so that a
  // Poisson plan is the one earlier versions drew for the same seed.
  t_ += burstiness_ == 1.0 ? exponential_(rng) : gamma_(rng);
  return t_;
}

std::vector<double> ArrivalOffsets(int n, double rate, double burstiness, std::mt19937_64& rng) {
  Arrivals arrivals(rate, burstiness);
  std::vector<double> t;
  for (int i = 0; i < n; ++i) t.push_back(arrivals.Next(rng));
  return t;
}

bool MeetsSlo(const Slo& slo, double ttft_s, double e2e_s, int tokens) {
  if (slo.ttft_s > 0 && ttft_s > slo.ttft_s) return false;
  if (slo.e2e_s > 0 && e2e_s > slo.e2e_s) return false;
  if (slo.tpot_s > 0 && tokens > 1 && (e2e_s - ttft_s) / (tokens - 1) > slo.tpot_s) return false;
  return true;
}

}  // namespace flover::clients
