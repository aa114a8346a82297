#include "util/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace flover::prometheus {
namespace {

void AtomicAdd(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

// HELP texts escape backslash and newline; label values also the double quote.
void AppendEscaped(std::string* out, absl::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (quote && c == '"') {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

void AppendLabels(std::string* out, const Labels& labels, absl::string_view extra_name = {},
                  absl::string_view extra_value = {}) {
  if (labels.empty() && extra_name.empty()) return;
  out->push_back('{');
  bool first = true;
  auto one = [&](absl::string_view name, absl::string_view value) {
    if (!first) out->push_back(',');
    first = false;
    absl::StrAppend(out, name, "=\"");
    AppendEscaped(out, value, /*quote=*/true);
    out->push_back('"');
  };
  for (const auto& [name, value] : labels) one(name, value);
  if (!extra_name.empty()) one(extra_name, extra_value);
  out->push_back('}');
}

}  // namespace

void Counter::Add(double v) { AtomicAdd(value_, v); }

void Gauge::Add(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      buckets_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  const size_t b = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) -
                   upper_bounds_.begin();  // first bound >= v; size() is +Inf
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  s.cumulative.resize(upper_bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> Histogram::ExponentialBounds(double start, double factor, int n) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < n; ++i, v *= factor) b.push_back(v);
  return b;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  // The shortest form that reads back as the same double (0.005, not
  // 0.0050000000000000001).
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void TextWriter::Family(absl::string_view name, absl::string_view type, absl::string_view help) {
  absl::StrAppend(&out_, "# HELP ", name, " ");
  AppendEscaped(&out_, help, /*quote=*/false);
  absl::StrAppend(&out_, "\n# TYPE ", name, " ", type, "\n");
}

void TextWriter::Sample(absl::string_view name, const Labels& labels, double value) {
  out_.append(name.data(), name.size());
  AppendLabels(&out_, labels);
  absl::StrAppend(&out_, " ", FormatValue(value), "\n");
}

void TextWriter::HistogramSamples(absl::string_view name, const Labels& labels,
                                  const Histogram::Snapshot& h) {
  const std::string bucket = absl::StrCat(name, "_bucket");
  for (size_t i = 0; i < h.cumulative.size(); ++i) {
    const double le = i < h.upper_bounds.size() ? h.upper_bounds[i] : INFINITY;
    out_.append(bucket);
    AppendLabels(&out_, labels, "le", FormatValue(le));
    absl::StrAppend(&out_, " ", h.cumulative[i], "\n");
  }
  Sample(absl::StrCat(name, "_sum"), labels, h.sum);
  Sample(absl::StrCat(name, "_count"), labels, static_cast<double>(h.count));
}

}  // namespace flover::prometheus
