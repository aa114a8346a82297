// JSON Schemas as constraints, measured the way the engine uses them, on a
// model's vocabulary (SmolLM2's 49,152 tokens by default): for each schema
// in a folder tree (one subfolder per category, as JSONSchemaBench lays
// them out), whether it compiles (or is refused: a keyword that would not be
// enforced, past a limit, or xgrammar's error), the compile time, and then
// the time of each token's step along a random walk through the grammar:
// Accept (the matcher moves on) and the next mask (xgrammar's fill, the
// control-byte mask, EOS), the work the engine does per token and
// constrained sequence. No model runs; the walk picks uniformly among the
// allowed tokens, ending where the output may end with probability 1/4.
//
//   tools/bazelw build //benchmarks:constraint_benchmark
//   .bazel-root/bin/benchmarks/constraint_benchmark --schemas=DIR [--per_category=N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "engine/choice_constraint.h"
#include "engine/constraint.h"
#include "engine/grammar_constraint.h"
#include "model/model_loader.h"

ABSL_FLAG(std::string, model, "models/SmolLM2-135M-Instruct.Q4_1.gguf", "Whose vocabulary and EOS");
ABSL_FLAG(std::string, schemas, "", "A folder of *.json schemas, one subfolder per category");
ABSL_FLAG(int, per_category, 0, "At most this many schemas of each category (0 = all), in name order");
ABSL_FLAG(int, walk_tokens, 64, "Most tokens walked per schema");
ABSL_FLAG(int, seed, 1, "The walks' seed");

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

struct Category {
  int schemas = 0, compiled = 0, refused_keyword = 0, refused_limit = 0, failed = 0, ended = 0;
  std::vector<double> compile_s, token_s;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace fs = std::filesystem;
  const std::string root = absl::GetFlag(FLAGS_schemas);
  if (root.empty() || !fs::is_directory(root)) {
    std::fprintf(stderr, "constraint_benchmark: --schemas must name a folder\n");
    return 2;
  }
  auto loaded = flover::LoadModel(absl::GetFlag(FLAGS_model));
  if (!loaded.ok() || (*loaded)->tokenizer() == nullptr) {
    std::fprintf(stderr, "constraint_benchmark: %s\n",
                 loaded.ok() ? "the model has no tokenizer" : std::string(loaded.status().message()).c_str());
    return 1;
  }
  auto tokens = std::make_shared<flover::TokenBytes>(*(*loaded)->tokenizer());
  flover::GrammarConstraints grammars(tokens, (*loaded)->info().eos_token_ids);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));

  std::map<std::string, std::vector<fs::path>> files;
  for (const auto& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(dir.path())) {
      if (f.path().extension() == ".json") files[dir.path().filename().string()].push_back(f.path());
    }
  }
  std::map<std::string, Category> categories;
  Category all;
  const auto started = Clock::now();
  for (auto& [name, paths] : files) {
    std::sort(paths.begin(), paths.end());
    const int limit = absl::GetFlag(FLAGS_per_category);
    if (limit > 0 && static_cast<int>(paths.size()) > limit) paths.resize(limit);
    Category& c = categories[name];
    for (const fs::path& path : paths) {
      std::ifstream in(path, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      ++c.schemas;
      const auto t0 = Clock::now();
      auto compiled = grammars.JsonSchema(text.str(), "schema");
      const double compile_s = Since(t0);
      if (!compiled.ok()) {
        const std::string why(compiled.status().message());
        if (absl::StrContains(why, "would not be enforced")) {
          ++c.refused_keyword;
        } else if (absl::StrContains(why, "at most") || absl::StrContains(why, "nested deeper")) {
          ++c.refused_limit;
        } else {
          ++c.failed;
        }
        continue;
      }
      ++c.compiled;
      c.compile_s.push_back(compile_s);
      std::unique_ptr<flover::ConstraintState> state = (*compiled)->Start();
      for (int step = 0; step < absl::GetFlag(FLAGS_walk_tokens); ++step) {
        if (state->Complete() && (!state->CanContinue() || rng() % 4 == 0)) {
          ++c.ended;
          break;
        }
        if (!state->CanContinue()) break;  // a dead end (not expected)
        std::vector<int32_t> allowed;
        const std::vector<uint32_t>& words = state->AllowedNext();
        for (size_t w = 0; w < words.size(); ++w) {
          for (uint32_t bits = words[w]; bits != 0; bits &= bits - 1) {
            allowed.push_back(static_cast<int32_t>(32 * w + __builtin_ctz(bits)));
          }
        }
        const int32_t token = allowed[rng() % allowed.size()];
        const auto t1 = Clock::now();
        const bool ok = state->Accept(token).ok();
        c.token_s.push_back(Since(t1));
        if (!ok) break;
      }
    }
    all.schemas += c.schemas;
    all.compiled += c.compiled;
    all.refused_keyword += c.refused_keyword;
    all.refused_limit += c.refused_limit;
    all.failed += c.failed;
    all.ended += c.ended;
    all.compile_s.insert(all.compile_s.end(), c.compile_s.begin(), c.compile_s.end());
    all.token_s.insert(all.token_s.end(), c.token_s.begin(), c.token_s.end());
  }
  std::printf("vocabulary %d tokens (%s); %d schemas in %.0f s, 1 thread\n\n", tokens->vocab_size(),
              absl::GetFlag(FLAGS_model).c_str(), all.schemas, Since(started));
  std::printf(
      "| category | schemas | compiled | refused: keyword | refused: limit | xgrammar error | compile ms p50 / "
      "p99 | token step us p50 / p99 / max | walks ended |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  auto row = [](const std::string& name, const Category& c) {
    auto pct = [&](int n) { return c.schemas ? 100.0 * n / c.schemas : 0.0; };
    std::printf("| %s | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f / %.1f | %.0f / %.0f / %.0f | %d |\n",
                name.c_str(), c.schemas, pct(c.compiled), pct(c.refused_keyword), pct(c.refused_limit),
                pct(c.failed), 1e3 * Quantile(c.compile_s, 0.5), 1e3 * Quantile(c.compile_s, 0.99),
                1e6 * Quantile(c.token_s, 0.5), 1e6 * Quantile(c.token_s, 0.99), 1e6 * Quantile(c.token_s, 1.0),
                c.ended);
  };
  for (const auto& [name, c] : categories) row(name, c);
  row("all", all);
  return 0;
}
