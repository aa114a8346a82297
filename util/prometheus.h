// Instruments for Prometheus metrics, and the text exposition format
// (version 0.0.4) that Prometheus scrapes.
//
// Counter, Gauge and Histogram are lock-free: any thread may update them and
// any thread may read them, so a scrape never blocks the thread that records
// (the engine loop). A histogram read while it is being updated is a
// consistent set of bucket counts (its count is their sum), and a sum that may
// be one observation ahead or behind; Prometheus tolerates that.
#ifndef FLOVER_UTIL_PROMETHEUS_H_
#define FLOVER_UTIL_PROMETHEUS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace flover::prometheus {

class Counter {
 public:
  void Add(double v);  // v >= 0
  void Increment() { Add(1); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `upper_bounds`: strictly increasing, finite; the +Inf bucket is implied.
  explicit Histogram(std::vector<double> upper_bounds);

  // Counts `v` in the first bucket whose upper bound is >= v (Prometheus'
  // "le" is inclusive).
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;   // without +Inf
    std::vector<uint64_t> cumulative;   // one more than upper_bounds: the last is +Inf
    double sum = 0;
    uint64_t count = 0;                 // == cumulative.back()
  };
  Snapshot Read() const;

  // Bounds start, start*factor, ... (n of them), as Prometheus'
  // ExponentialBuckets.
  static std::vector<double> ExponentialBounds(double start, double factor, int n);

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative; +Inf last
  std::atomic<double> sum_{0};
};

// Label names and values of one sample, in the order written.
using Labels = std::vector<std::pair<std::string, std::string>>;

// Builds an exposition: each family's HELP and TYPE lines, then its samples.
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]* (checked by the caller's tests,
// not here); label values and help texts are escaped as the format asks.
class TextWriter {
 public:
  // type: "counter", "gauge", "histogram" or "untyped".
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  void Sample(absl::string_view name, const Labels& labels, double value);
  // The _bucket, _sum and _count samples of one histogram.
  void HistogramSamples(absl::string_view name, const Labels& labels,
                        const Histogram::Snapshot& h);

  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Formats a sample value as the format writes it: integers without a
// fraction, +Inf/-Inf/NaN spelled out, other values with enough digits to
// read back exactly.
std::string FormatValue(double v);

// The content type to serve an exposition with.
inline constexpr absl::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace flover::prometheus

#endif  // FLOVER_UTIL_PROMETHEUS_H_
