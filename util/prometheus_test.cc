#include "util/prometheus.h"

#include <cmath>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace flover::prometheus {
namespace {

TEST(PrometheusTest, HistogramBucketsAreInclusiveAndCumulative) {
  Histogram h({0.5, 1, 2});
  for (double v : {0.1, 0.5, 0.6, 1.0, 2.0, 2.5, 100.0}) h.Observe(v);
  const Histogram::Snapshot s = h.Read();
  // le=0.5: 0.1, 0.5; le=1: + 0.6, 1.0; le=2: + 2.0; +Inf: + 2.5, 100.
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 5, 7}));
  EXPECT_EQ(s.count, 7u);
  EXPECT_DOUBLE_EQ(s.sum, 0.1 + 0.5 + 0.6 + 1.0 + 2.0 + 2.5 + 100.0);
}

TEST(PrometheusTest, ConcurrentUpdatesAreAllCounted) {
  Counter c;
  Gauge g;
  Histogram h({1, 10});
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        c.Add(0.5);
        g.Add(t % 2 == 0 ? 1 : -1);
        h.Observe(i % 3 == 0 ? 0.5 : 5);  // sums are exact in binary
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), kThreads * kEach * 0.5);
  EXPECT_EQ(g.Value(), 0);
  const Histogram::Snapshot s = h.Read();
  const uint64_t small = kThreads * ((kEach + 2) / 3);
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{small, kThreads * kEach, kThreads * kEach}));
  EXPECT_EQ(s.sum, small * 0.5 + (kThreads * kEach - small) * 5.0);
}

TEST(PrometheusTest, FormatsValuesAsTheFormatSpellsThem) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(0.1 + 0.2), "0.30000000000000004");  // reads back exactly
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
}

TEST(PrometheusTest, WritesTheTextExposition) {
  Histogram h({0.25, 1});
  h.Observe(0.25);
  h.Observe(3);
  TextWriter w;
  w.Family("x_requests_total", "counter", "Requests,\nby \\ code.");
  w.Sample("x_requests_total", {{"code", "a\"b\\c\nd"}, {"k", "v"}}, 3);
  w.Family("x_up", "gauge", "Up.");
  w.Sample("x_up", {}, 1);
  w.Family("x_latency_seconds", "histogram", "Latency.");
  w.HistogramSamples("x_latency_seconds", {{"path", "/a"}}, h.Read());
  EXPECT_EQ(w.text(),
            "# HELP x_requests_total Requests,\\nby \\\\ code.\n"
            "# TYPE x_requests_total counter\n"
            "x_requests_total{code=\"a\\\"b\\\\c\\nd\",k=\"v\"} 3\n"
            "# HELP x_up Up.\n"
            "# TYPE x_up gauge\n"
            "x_up 1\n"
            "# HELP x_latency_seconds Latency.\n"
            "# TYPE x_latency_seconds histogram\n"
            "x_latency_seconds_bucket{path=\"/a\",le=\"0.25\"} 1\n"
            "x_latency_seconds_bucket{path=\"/a\",le=\"1\"} 1\n"
            "x_latency_seconds_bucket{path=\"/a\",le=\"+Inf\"} 2\n"
            "x_latency_seconds_sum{path=\"/a\"} 3.25\n"
            "x_latency_seconds_count{path=\"/a\"} 2\n");
}

TEST(PrometheusTest, ExponentialBounds) {
  EXPECT_EQ(Histogram::ExponentialBounds(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

}  // namespace
}  // namespace flover::prometheus
