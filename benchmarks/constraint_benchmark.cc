// JSON Schemas as constraints, measured the way the engine uses them, on a
// model's vocabulary (SmolLM2's 49,152 tokens by default). Two modes:
//
// --schemas=DIR (speed): for each schema in a folder tree (one subfolder per
// category, as JSONSchemaBench's data/ lays them out), whether it compiles
// (or is refused: a keyword that would not be enforced, past a limit, or
// xgrammar's error), the compile time, and then the time of each token's
// step along a random walk through the grammar: Accept (the matcher moves
// on) and the next mask (xgrammar's fill, the control-byte mask, EOS), the
// work the engine does per token and constrained sequence. No model runs;
// the walk picks uniformly among the allowed tokens, ending where the
// output may end with probability 1/4.
//
// --maskbench=DIR (correctness, as MaskBench measures it, still no model):
// DIR/*.json each hold {"schema", "tests": [{"valid", "data"}]}
// (JSONSchemaBench's maskbench/data). Each schema is compiled as the server
// compiles a response_format json_schema (its text as the server re-writes
// it, then GrammarConstraints::JsonSchema: non-strict, no free whitespace);
// each test's data is written as the grammar writes JSON (", " and ": ",
// the instance's property order, strings as Python's json.dumps with
// ensure_ascii=False writes them: MaskBench's own serialisation), tokenized
// without special tokens, and driven through a fresh constraint state token
// by token as the engine does (the token must be in the mask, then Accept),
// then EOS must be allowed. Where a token is refused the rest is tried byte
// by byte (single-byte tokens), so a tokenization the grammar would not
// produce is not counted against it. A valid instance must go through and
// end; an invalid one must be refused somewhere (or not be allowed to end).
// A schema passes when it compiles and all its tests agree (schemas without
// tests pass when they compile, as MaskBench counts them). Instances past
// --max_instance_bytes are skipped (and counted). Prints a table per
// category (the file name before "---", or before its last "_N") and a few
// example file names per kind of failure; --failures=FILE lists them all.
//
//   tools/bazelw build //benchmarks:constraint_benchmark
//   .bazel-root/bin/benchmarks/constraint_benchmark --schemas=DIR [--per_category=N]
//   .bazel-root/bin/benchmarks/constraint_benchmark --maskbench=DIR [--per_category=N]
//       [--max_instance_bytes=16384] [--examples=5] [--failures=FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
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
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

ABSL_FLAG(std::string, model, "models/SmolLM2-135M-Instruct.Q4_1.gguf", "Whose vocabulary and EOS");
ABSL_FLAG(std::string, schemas, "", "A folder of *.json schemas, one subfolder per category");
ABSL_FLAG(int, per_category, 0, "At most this many schemas of each category (0 = all), in name order");
ABSL_FLAG(int, walk_tokens, 64, "Most tokens walked per schema");
ABSL_FLAG(int, seed, 1, "The walks' seed");
ABSL_FLAG(std::string, maskbench, "",
          "MaskBench's data folder (*.json, each a schema and its tests): measure correctness instead");
ABSL_FLAG(int, max_instance_bytes, 16384, "--maskbench: skip test instances longer than this (as written)");
ABSL_FLAG(int, examples, 5, "--maskbench: example file names printed per kind of failure");
ABSL_FLAG(std::string, failures, "", "--maskbench: write every failure (file, test, where) to this file");
ABSL_FLAG(std::string, print_enforced, "",
          "Print the schema in this file (a schema, or MaskBench's {\"schema\": ...}) as the server hands it to "
          "xgrammar (EnforcedJsonSchema: rewritten, strict formats), or why it is refused; nothing else runs");
ABSL_FLAG(bool, compact, false, "--maskbench: write instances with \",\" and \":\" (no spaces) instead");

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


// --maskbench.

// Objects keep their properties in the order they came (the server's Json,
// server/json_body.h).
using Json = nlohmann::ordered_json;

// A double as Python's repr writes it (json.dumps uses it): the shortest
// digits that read back the same, fixed notation for exponents -4 to 15
// (with at least one decimal: 1.0), otherwise d.ddde+XX.
std::string PythonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string text(buf);
  const bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits = text.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    } else {
      if (digits.size() < static_cast<size_t>(exponent) + 1) digits.resize(exponent + 1, '0');
      const std::string fraction = digits.substr(exponent + 1);
      out += digits.substr(0, exponent + 1) + "." + (fraction.empty() ? "0" : fraction);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += buf;
  }
  return out;
}

// `value` as MaskBench writes an instance (json.dumps(data, indent=None,
// ensure_ascii=False)), which is how xgrammar's non-free-whitespace grammar
// writes JSON: ", " between items, ": " after keys, properties in the
// instance's order; strings escape ", backslash and control bytes only (nlohmann's
// escapes are Python's). With `compact`, "," and ":".
void WriteInstance(const Json& value, bool compact, std::string& out) {
  const char* comma = compact ? "," : ", ";
  const char* colon = compact ? ":" : ": ";
  switch (value.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += comma;
        first = false;
        out += Json(key).dump(-1, ' ', false, Json::error_handler_t::replace);
        out += colon;
        WriteInstance(item, compact, out);
      }
      out += '}';
      break;
    }
    case Json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += comma;
        WriteInstance(value[i], compact, out);
      }
      out += ']';
      break;
    }
    case Json::value_t::number_float:
      out += PythonFloat(value.get<double>());
      break;
    case Json::value_t::binary:  // an integer past 64 bits (InstanceReader)
      out.append(value.get_binary().begin(), value.get_binary().end());
      break;
    default:  // null, booleans, integers, strings
      out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

// A file's JSON as Python's json.loads reads it, for its instances: as Json
// (parse), except integers past 64 bits, which nlohmann reads as doubles and
// Python keeps whole: those are kept as their digits (a Json binary, which
// JSON text never makes; WriteInstance writes it back).
class InstanceReader final : public nlohmann::json_sax<Json> {
 public:
  Json root;
  bool null() override { return Put(Json(nullptr)); }
  bool boolean(bool b) override { return Put(Json(b)); }
  bool number_integer(number_integer_t i) override { return Put(Json(i)); }
  bool number_unsigned(number_unsigned_t u) override { return Put(Json(u)); }
  bool number_float(number_float_t d, const string_t& text) override {
    if (text.find_first_of(".eE") == string_t::npos) return Put(Json::binary({text.begin(), text.end()}));
    return Put(Json(d));
  }
  bool string(string_t& v) override { return Put(Json(v)); }
  bool binary(binary_t& v) override { return Put(Json::binary(v)); }
  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  // Where a value goes: the root, the open array's end, or the open
  // object's key. Pointers into the open containers stay valid: nothing is
  // added to a container while one inside it is open.
  Json* Slot() {
    if (open_.empty()) return &root;
    Json& top = *open_.back();
    if (top.is_array()) {
      top.push_back(nullptr);
      return &top.back();
    }
    return &top[key_];
  }
  bool Put(Json v) {
    *Slot() = std::move(v);
    return true;
  }
  bool Open(Json v) {
    Json* slot = Slot();
    *slot = std::move(v);
    open_.push_back(slot);
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }
  std::vector<Json*> open_;
  std::string key_;
};

// The category of a MaskBench file: its name before "---"
// (Github_easy---o13947.json), or before its last "_N" (BFCL_java_12.json).
std::string MaskBenchCategory(const std::string& file) {
  std::string name = file.substr(0, file.size() - std::string(".json").size());
  if (const size_t dashes = name.find("---"); dashes != std::string::npos) return name.substr(0, dashes);
  const size_t underscore = name.rfind('_');
  if (underscore != std::string::npos && underscore + 1 < name.size() &&
      std::all_of(name.begin() + underscore + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return name.substr(0, underscore);
  }
  return name;
}

// What happened to one instance, driven through a fresh state.
struct Run {
  bool through = false;      // every byte was accepted
  bool can_end = false;      // and EOS is allowed after it
  bool byte_rescue = false;  // a token was refused, its bytes one by one were not
  bool matcher_takes_token = false;  // (byte_rescue) Accept takes it, the mask had not
  size_t refused_at = 0;     // the first byte refused (through == false), or
                             // where the refused token began (byte_rescue)
  std::string refused;       // the token the engine's path refused
  int tokens = 0;            // steps taken (tokens and bytes)
};

Run Drive(const flover::CompiledConstraint& constraint, const std::string& text,
          const std::vector<int32_t>& ids, const flover::TokenBytes& vocab,
          const std::vector<int32_t>& byte_token) {
  Run run;
  std::unique_ptr<flover::ConstraintState> state = constraint.Start();
  size_t at = 0;  // bytes accepted so far
  size_t i = 0;
  for (; i < ids.size(); ++i) {
    const int32_t t = ids[i];
    if (!flover::HasToken(state->AllowedNext(), t)) break;
    if (!state->Accept(t).ok()) {  // allowed by the mask but refused: not expected
      run.refused_at = at;
      run.refused = vocab.Of(t);
      return run;
    }
    ++run.tokens;
    at += vocab.Of(t).size();
  }
  if (i < ids.size()) {
    // The tokenizer's split was refused: the rest byte by byte, a split the
    // grammar may prefer (and a model can write).
    const std::string token = vocab.Of(ids[i]);
    run.refused_at = at;
    run.refused = token;
    for (; at < text.size(); ++at) {
      const int32_t b = byte_token[static_cast<unsigned char>(text[at])];
      if (b < 0 || !flover::HasToken(state->AllowedNext(), b) || !state->Accept(b).ok()) {
        run.refused_at = at;  // the first byte the grammar refuses
        return run;
      }
      ++run.tokens;
    }
    run.byte_rescue = true;
    // Whether the matcher takes the token the mask left out (a mask that
    // disagrees with its own matcher) or not (the token's bytes go through
    // one by one but not as one token).
    std::unique_ptr<flover::ConstraintState> replay = constraint.Start();
    for (size_t j = 0; j < i; ++j) (void)replay->Accept(ids[j]);
    run.matcher_takes_token = replay->Accept(ids[i]).ok();
  }
  run.through = true;
  run.can_end = state->Complete();
  return run;
}

enum Failure {
  kValidRefused,     // a valid instance refused at a token (and byte by byte)
  kValidCannotEnd,   // a valid instance went through, but EOS was not allowed
  kInvalidAccepted,  // an invalid instance went through and could end
  kByteRescue,       // a token refused whose bytes went through (not a failure)
  kRefusedKeyword,
  kRefusedLimit,
  kXgrammarError,
  kUnreadable,       // the file is not MaskBench's JSON
  kFailureKinds
};
const char* const kFailureNames[kFailureKinds] = {
    "validation error: valid instance refused at a token",
    "validation error: valid instance went through but may not end",
    "invalidation error: invalid instance accepted (went through and may end)",
    "tokenization: a token refused whose bytes went through one by one (counted as accepted)",
    "refused at compile: keyword",
    "refused at compile: limit",
    "refused at compile: xgrammar error",
    "unreadable file"};

struct MaskCategory {
  int schemas = 0, with_tests = 0, compiled = 0, passing = 0, passing_with_tests = 0;
  int validation_errors = 0, invalidation_errors = 0;  // schemas with at least one
  int refused_keyword = 0, refused_limit = 0, failed = 0, unreadable = 0;
  int valid_tests = 0, valid_ok = 0, invalid_tests = 0, invalid_ok = 0, skipped = 0, byte_rescues = 0;
  int invalid_through_no_end = 0;  // invalid instances refused only by EOS (MaskBench would accept)
  int64_t tokens = 0;

  void Add(const MaskCategory& c) {
    schemas += c.schemas, with_tests += c.with_tests, compiled += c.compiled, passing += c.passing;
    passing_with_tests += c.passing_with_tests, validation_errors += c.validation_errors;
    invalidation_errors += c.invalidation_errors, refused_keyword += c.refused_keyword;
    refused_limit += c.refused_limit, failed += c.failed, unreadable += c.unreadable;
    valid_tests += c.valid_tests, valid_ok += c.valid_ok, invalid_tests += c.invalid_tests;
    invalid_ok += c.invalid_ok, skipped += c.skipped, byte_rescues += c.byte_rescues;
    invalid_through_no_end += c.invalid_through_no_end, tokens += c.tokens;
  }
};

// What the JSON text has at byte `at`: inside an object's key, inside a
// string value, a number, a literal (true, false, null), or between values
// (a "," "}" "]" refused: an item or property too many or too few).
std::string Where(const std::string& text, size_t at) {
  std::vector<char> open;  // '{' or '['
  bool in_string = false, key = false, expect_key = false;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      key = expect_key;
      expect_key = false;
    } else if (c == '{' || c == '[') {
      open.push_back(c);
      expect_key = c == '{';
    } else if (c == '}' || c == ']') {
      if (!open.empty()) open.pop_back();
    } else if (c == ',') {
      expect_key = !open.empty() && open.back() == '{';
    }
  }
  if (in_string) return key ? "in a key" : "in a string";
  if (at >= text.size()) return "at the end";
  const char c = text[at];
  if (c == '"') return expect_key ? "at a key" : "at a string";
  if (c == '-' || (c >= '0' && c <= '9')) return "at a number";
  if (c == 't' || c == 'f' || c == 'n') return "at a literal";
  if (c == '{' || c == '[') return "at an object / array";
  return std::string("at \"") + c + "\"";
}

// Up to 120 bytes of `text` around `at`, on one line.
std::string Around(const std::string& text, size_t at) {
  const size_t from = at > 80 ? at - 80 : 0;
  std::string s = (from > 0 ? "..." : "") + text.substr(from, at - from) + "<<HERE>>" + text.substr(at, 40) +
                  (at + 40 < text.size() ? "..." : "");
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s;
}

int RunMaskBench(const std::string& root, const flover::Tokenizer& tokenizer,
                 const std::shared_ptr<const flover::TokenBytes>& vocab, flover::GrammarConstraints& grammars) {
  namespace fs = std::filesystem;
  const bool compact = absl::GetFlag(FLAGS_compact);
  const size_t max_bytes = static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_max_instance_bytes)));
  const size_t max_examples = static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_examples)));
  std::FILE* failures = nullptr;
  if (!absl::GetFlag(FLAGS_failures).empty()) {
    failures = std::fopen(absl::GetFlag(FLAGS_failures).c_str(), "w");
    if (failures == nullptr) {
      std::fprintf(stderr, "constraint_benchmark: cannot write %s\n", absl::GetFlag(FLAGS_failures).c_str());
      return 2;
    }
  }
  // Each byte's own token (byte-level vocabularies have all 256), or -1.
  std::vector<int32_t> byte_token(256, -1);
  for (int b = 0; b < 256; ++b) {
    if (const auto* ids = vocab->TokensSpelling(std::string(1, static_cast<char>(b))); ids && !ids->empty()) {
      byte_token[b] = ids->front();
    }
  }

  std::map<std::string, std::vector<std::string>> files;  // category -> file names
  for (const auto& f : fs::directory_iterator(root)) {
    const std::string name = f.path().filename().string();
    if (f.is_regular_file() && f.path().extension() == ".json") files[MaskBenchCategory(name)].push_back(name);
  }
  std::map<std::string, MaskCategory> categories;
  MaskCategory all;
  std::vector<std::vector<std::string>> examples(kFailureKinds);
  int failure_counts[kFailureKinds] = {};
  std::map<std::string, int> refused_where;  // valid instances refused, by where
  auto note = [&](Failure kind, const std::string& file, const std::string& detail) {
    ++failure_counts[kind];
    if (examples[kind].size() < max_examples) examples[kind].push_back(file + ": " + detail);
    if (failures != nullptr) std::fprintf(failures, "%d\t%s\t%s\n", static_cast<int>(kind), file.c_str(), detail.c_str());
  };
  const auto started = Clock::now();
  int done = 0;
  for (auto& [category, names] : files) {
    std::sort(names.begin(), names.end());
    const int limit = absl::GetFlag(FLAGS_per_category);
    if (limit > 0 && static_cast<int>(names.size()) > limit) names.resize(limit);
    MaskCategory& c = categories[category];
    for (const std::string& name : names) {
      if (++done % 500 == 0) {
        std::fprintf(stderr, "%d schemas, %.0f s\n", done, Since(started));
      }
      ++c.schemas;
      // The schema as the server reads it (Json), the tests as MaskBench
      // does (InstanceReader).
      Json file;
      InstanceReader instances;
      {
        std::ifstream in(fs::path(root) / name, std::ios::binary);
        std::ostringstream text;
        text << in.rdbuf();
        file = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
        if (!file.is_discarded() && !Json::sax_parse(text.str(), &instances)) instances.root = nullptr;
      }
      if (file.is_discarded() || !file.is_object() || !file.contains("schema") || !instances.root.is_object() ||
          (instances.root.contains("tests") && !instances.root["tests"].is_array())) {
        ++c.unreadable;
        note(kUnreadable, name, "");
        continue;
      }
      const Json empty = Json::array();
      const Json& tests = instances.root.contains("tests") ? instances.root["tests"] : empty;
      if (!tests.empty()) ++c.with_tests;
      // As the server sends response_format.json_schema.schema on
      // (server/json_body.h's JsonText).
      const std::string schema = file["schema"].dump(-1, ' ', false, Json::error_handler_t::replace);
      auto compiled = grammars.JsonSchema(schema, "schema");
      if (!compiled.ok()) {
        const std::string why(compiled.status().message());
        if (absl::StrContains(why, "would not be enforced")) {
          ++c.refused_keyword;
          note(kRefusedKeyword, name, why);
        } else if (absl::StrContains(why, "at most") || absl::StrContains(why, "nested deeper")) {
          ++c.refused_limit;
          note(kRefusedLimit, name, why);
        } else {
          ++c.failed;
          note(kXgrammarError, name, why);
        }
        continue;
      }
      ++c.compiled;
      bool validation_error = false, invalidation_error = false;
      for (size_t i = 0; i < tests.size(); ++i) {
        const Json& test = tests[i];
        if (!test.is_object() || !test.contains("data") || !test.contains("valid") || !test["valid"].is_boolean()) {
          continue;
        }
        const bool valid = test["valid"].get<bool>();
        std::string text;
        WriteInstance(test["data"], compact, text);
        if (max_bytes > 0 && text.size() > max_bytes) {
          ++c.skipped;
          continue;
        }
        auto ids = tokenizer.Encode(text, /*add_special_tokens=*/false);
        if (!ids.ok()) {  // not expected: the text is JSON read as UTF-8
          ++c.skipped;
          continue;
        }
        const Run run = Drive(**compiled, text, *ids, *vocab, byte_token);
        c.tokens += run.tokens;
        const std::string test_name = "test " + std::to_string(i) + (valid ? " (valid)" : " (invalid)");
        if (run.byte_rescue) {
          ++c.byte_rescues;
          note(kByteRescue, name,
               test_name + ": token " + Json(run.refused).dump(-1, ' ', false, Json::error_handler_t::replace) +
                   " at byte " + std::to_string(run.refused_at) +
                   (run.matcher_takes_token ? " (not in the mask, Accept takes it)" : " (Accept refuses it too)") +
                   ": " + Around(text, run.refused_at));
        }
        const bool accepted = run.through && run.can_end;
        if (valid) {
          ++c.valid_tests;
          if (accepted) {
            ++c.valid_ok;
          } else {
            validation_error = true;
            if (!run.through) {
              ++refused_where[Where(text, run.refused_at)];
              note(kValidRefused, name,
                   test_name + ": " + Where(text, run.refused_at) + ", byte " + std::to_string(run.refused_at) +
                       " (token " + Json(run.refused).dump(-1, ' ', false, Json::error_handler_t::replace) +
                       "): " + Around(text, run.refused_at));
            } else {
              note(kValidCannotEnd, name, test_name + ": " + Around(text, text.size()));
            }
          }
        } else {
          ++c.invalid_tests;
          if (run.through && !run.can_end) ++c.invalid_through_no_end;
          if (!accepted) {
            ++c.invalid_ok;
          } else {
            invalidation_error = true;
            const std::string why = test.contains("python_error") && test["python_error"].is_string()
                                        ? test["python_error"].get<std::string>().substr(0, 160)
                                        : std::string();
            std::string detail = test_name + ": " + (text.size() > 160 ? text.substr(0, 160) + "..." : text) +
                                 " | should fail: " + why;
            for (char& ch : detail) {
              if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
            }
            note(kInvalidAccepted, name, detail);
          }
        }
      }
      c.validation_errors += validation_error;
      c.invalidation_errors += invalidation_error;
      if (!validation_error && !invalidation_error) {
        ++c.passing;
        if (!tests.empty()) ++c.passing_with_tests;
      }
    }
    all.Add(c);
  }
  if (failures != nullptr) std::fclose(failures);

  std::printf("vocabulary %d tokens (%s); MaskBench: %d schemas, %d instances (%lld tokens) in %.0f s, 1 thread\n",
              vocab->vocab_size(), absl::GetFlag(FLAGS_model).c_str(), all.schemas,
              all.valid_tests + all.invalid_tests, static_cast<long long>(all.tokens), Since(started));
  std::printf("instances written with \"%s\" and \"%s\"; %d longer than %zu bytes skipped\n\n",
              compact ? "," : ", ", compact ? ":" : ": ", all.skipped, max_bytes);
  std::printf(
      "| category | schemas | with tests | compiled | passing | passing (with tests) | validation errors | "
      "invalidation errors | refused: keyword | refused: limit | xgrammar error | valid instances accepted | "
      "invalid instances refused |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  auto row = [](const std::string& name, const MaskCategory& c) {
    std::printf("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d / %d | %d / %d |\n", name.c_str(),
                c.schemas, c.with_tests, c.compiled, c.passing, c.passing_with_tests, c.validation_errors,
                c.invalidation_errors, c.refused_keyword, c.refused_limit, c.failed, c.valid_ok, c.valid_tests,
                c.invalid_ok, c.invalid_tests);
  };
  for (const auto& [name, c] : categories) row(name, c);
  row("all", all);
  std::printf(
      "\npassing: compiled, and every test agrees (a schema without tests passes when it compiles, as MaskBench "
      "counts); validation / invalidation errors: schemas with at least one valid instance refused / invalid "
      "instance accepted (a schema may have both). %d unreadable files.\n",
      all.unreadable);
  std::printf(
      "%d invalid instances were refused only at the end (EOS not allowed; MaskBench, which checks no EOS, "
      "would count them accepted); %d instances went through only byte by byte (a token refused).\n",
      all.invalid_through_no_end, all.byte_rescues);
  for (int k = 0; k < kFailureKinds; ++k) {
    if (failure_counts[k] == 0) continue;
    std::printf("\n%s: %d\n", kFailureNames[k], failure_counts[k]);
    if (k == kValidRefused) {
      std::printf("  (where:");
      for (const auto& [where, n] : refused_where) std::printf(" %s %d;", where.c_str(), n);
      std::printf(")\n");
    }
    for (const std::string& e : examples[k]) std::printf("  %s\n", e.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace fs = std::filesystem;
  if (const std::string file = absl::GetFlag(FLAGS_print_enforced); !file.empty()) {
    std::ifstream in(file);
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("schema") && doc.contains("tests")) doc = doc["schema"];
    auto enforced = flover::EnforcedJsonSchema(doc.dump(), "schema");
    std::printf("%s\n", enforced.ok() ? enforced->c_str() : std::string(enforced.status().message()).c_str());
    return enforced.ok() ? 0 : 1;
  }
  const std::string root = absl::GetFlag(FLAGS_schemas);
  const std::string maskbench = absl::GetFlag(FLAGS_maskbench);
  if (!maskbench.empty() ? !fs::is_directory(maskbench) : root.empty() || !fs::is_directory(root)) {
    std::fprintf(stderr, "constraint_benchmark: --schemas (or --maskbench) must name a folder\n");
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
  if (!maskbench.empty()) return RunMaskBench(maskbench, *(*loaded)->tokenizer(), tokens, grammars);
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
