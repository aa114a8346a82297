// Jinja2's lexer and parser, for the subset chat templates use, with the
// environment transformers compiles chat templates in: trim_blocks and
// lstrip_blocks on, "-" / "+" whitespace control, newlines normalized to
// "\n" and one trailing newline dropped (keep_trailing_newline off).
//
// Statements: if/elif/else, for (tuple targets, "if" filter, else), set
// (names, namespace attributes, tuples, blocks), macro, break/continue,
// filter blocks, raw, and transformers' generation block. Expressions: the
// literals, names, attributes, subscripts and slices, calls with keyword
// arguments, filters, tests (is / is not), unary - + not, ** * / // % + - ~,
// comparisons (chained, in, not in), and / or, and x if c else y, with
// jinja2's precedence.
#ifndef FLOVER_CHAT_JINJA_PARSE_H_
#define FLOVER_CHAT_JINJA_PARSE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chat/jinja_ast.h"

namespace flover::jinja {

// InvalidArgument naming the line and the problem for what it cannot parse.
absl::StatusOr<Body> ParseTemplate(absl::string_view source);

}  // namespace flover::jinja

#endif  // FLOVER_CHAT_JINJA_PARSE_H_
