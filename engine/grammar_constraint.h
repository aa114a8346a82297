// JSON Schemas, any JSON object, regular expressions and EBNF grammars as
// constraints (engine/constraint.h), compiled by xgrammar's C++ core
// (//third_party/xgrammar) against the vocabulary's bytes: its grammar
// matcher gives each sequence the tokens that may come next (its adaptive
// token-mask cache makes that microseconds per token), and end of sequence
// where the output is complete. JSON comes out compact (xgrammar's
// separators, no free whitespace). Compiled grammars are cached by their text
// (xgrammar's own cache, bounded to kGrammarCacheBytes, least recently used
// first out). Nothing of xgrammar leaks into this header.
#ifndef FLOVER_ENGINE_GRAMMAR_CONSTRAINT_H_
#define FLOVER_ENGINE_GRAMMAR_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/choice_constraint.h"
#include "engine/constraint.h"
#include "engine/json_schema.h"
#include "engine/json_string_limits.h"

namespace flover {

// Bounds on what a request may send (a schema's, and the nesting limit, are
// in engine/json_schema.h).
inline constexpr size_t kMaxRegexBytes = 4 << 10;
inline constexpr size_t kMaxGrammarBytes = 64 << 10;
inline constexpr int64_t kGrammarCacheBytes = int64_t{256} << 20;

class GrammarConstraints {
 public:
  // `end_ids`: the model's EOS ids, where xgrammar marks an output complete.
  GrammarConstraints(std::shared_ptr<const TokenBytes> tokens, std::vector<int32_t> end_ids);
  ~GrammarConstraints();

  // Each refuses what cannot be compiled with InvalidArgument naming
  // `field` and saying why (xgrammar's message), and past the size and
  // depth limits. A JSON Schema is first rewritten into forms xgrammar
  // 0.2.8 enforces exactly (engine/json_schema_rewrite.h); what no rewrite
  // makes exact is refused by keyword and JSON pointer (EnforcedJsonSchema,
  // engine/json_schema.h; docs/api.md lists them). A regex reaches xgrammar
  // around its bugs (RegexForXgrammar). Thread-safe.
  // `limits` on the output's string values (engine/json_string_limits.h),
  // none by default.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> JsonSchema(const std::string& schema,
                                                                      const std::string& field,
                                                                      JsonStringLimits limits = {});
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> AnyJson(const std::string& field,
                                                                   JsonStringLimits limits = {});
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Regex(const std::string& regex,
                                                                 const std::string& field);
  // xgrammar's EBNF (GBNF-like: `root ::= "yes" | "no"`), rule `root` first.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Grammar(const std::string& ebnf,
                                                                   const std::string& field);
  // An xgrammar structural tag (JSON: tags, triggers, schemas), built by the
  // server (chat/tool_calls.h's tool-call grammars), so not checked for
  // keywords here: build it from EnforcedJsonSchema's schemas. Its JSON is strict
  // (no properties beyond a schema's), with at most one whitespace in a row.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> StructuralTag(const std::string& tag,
                                                                         const std::string& field);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_GRAMMAR_CONSTRAINT_H_
