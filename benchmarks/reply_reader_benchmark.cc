// The reply reader's cost per token (chat/reply_reader.h): what splitting a
// streamed reply into reasoning, content and tool calls adds to each token
// a chat API sends. A reply of --tokens pieces (1-6 bytes each, as tokens
// decode) with <think> reasoning, an answer and, with tools, a hermes call,
// pushed piece by piece; the time of each Push, p50 and p99 over --repeats
// replies, for each reader setting.
//
//   tools/bazelw build //benchmarks:reply_reader_benchmark
//   .bazel-root/bin/benchmarks/reply_reader_benchmark [--tokens=2000] [--repeats=50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "chat/reply_reader.h"

ABSL_FLAG(int, tokens, 2000, "pieces per reply");
ABSL_FLAG(int, repeats, 50, "replies per setting");

namespace {

std::vector<std::string> Pieces(int tokens, bool tools) {
  std::mt19937 rng(7);
  const std::string words = "the model thinks about what the user asked and why it matters to them ";
  std::string text = "<think>\n";
  while (static_cast<int>(text.size()) < tokens * 3) text += words.substr(rng() % 20, 20);
  text += "\n</think>\n\nThe answer is short.";
  if (tools) text += "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"C\"}}\n</tool_call>";
  std::vector<std::string> pieces;
  for (size_t at = 0; at < text.size();) {
    const size_t n = 1 + rng() % 6;
    pieces.push_back(text.substr(at, n));
    at += n;
  }
  return pieces;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::printf("| reader | pieces per reply | p50 ns per piece | p99 ns per piece | mean ns |\n|---|---:|---:|---:|---:|\n");
  struct Setting {
    const char* name;
    flover::ReasoningFormat reasoning;
    bool tools;
  };
  for (const Setting& s : {Setting{"none", flover::ReasoningFormat::kNone, false},
                           Setting{"think", flover::ReasoningFormat::kThinkTags, false},
                           Setting{"think + hermes calls (streamed)", flover::ReasoningFormat::kThinkTags, true}}) {
    const std::vector<std::string> pieces = Pieces(absl::GetFlag(FLAGS_tokens), s.tools);
    std::vector<double> ns;
    size_t sink = 0;
    for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      flover::ReplyReader::Options o;
      o.reasoning = s.reasoning;
      if (s.tools) o.tools = flover::ToolCallFormat::kHermes;
      o.stream_arguments = true;
      flover::ReplyReader reader(o);
      for (const std::string& p : pieces) {
        const auto start = std::chrono::steady_clock::now();
        sink += reader.Push(p).size();
        ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
      }
      sink += reader.Finish().size();
    }
    double mean = 0;
    for (double v : ns) mean += v / ns.size();
    std::sort(ns.begin(), ns.end());
    std::printf("| %s | %zu | %.0f | %.0f | %.0f |\n", s.name, pieces.size(), ns[ns.size() / 2],
                ns[ns.size() * 99 / 100], mean);
    if (sink == 0) std::printf("(no events)\n");
  }
  return 0;
}
