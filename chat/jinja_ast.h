// The parsed form of a template (jinja_parse builds it, jinja.cc's renderer
// walks it): expressions and statements as jinja2's parser makes them.
#ifndef FLOVER_CHAT_JINJA_AST_H_
#define FLOVER_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace flover::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // kwargs-like pairs in `items` (key expressions in args)
    kGetAttr,   // args[0] . name
    kGetItem,   // args[0] [ args[1] ]
    kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null parts absent)
    kCall,      // args[0] ( args[1..] , kwargs )
    kFilter,    // args[0] | name ( args[1..] , kwargs )
    kTest,      // args[0] is [not] name ( args[1..] , kwargs )
    kNeg,       // - args[0]
    kPos,       // + args[0]
    kNot,       // not args[0]
    kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be absent)
  };
  Kind kind = kLiteral;
  int line = 0;
  Value value;
  std::string name;  // kName, kGetAttr, kFilter, kTest; the operator of kBinary
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest: "is not"
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body)...; else_body
    kFor,       // targets in expr [if filter]: body; else_body
    kSet,       // targets (or name.attr) = expr
    kSetBlock,  // {% set name %}body{% endset %}
    kMacro,     // name(params with defaults): body
    kBreak,
    kContinue,
    kBody,      // {% generation %}body{% endgeneration %}: the body as is
    kFilterBlock,  // {% filter expr-without-subject %}body{% endfilter %}
  };
  Kind kind = kText;
  int line = 0;
  std::string text;
  ExprPtr expr;    // kOutput, kFor (iterable), kSet (value), kFilterBlock (the filter, args[0] empty)
  ExprPtr filter;  // kFor: the loop's "if"
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body, else_body;
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock; kMacro: its name
  std::string attribute;             // kSet of a namespace attribute: targets[0].attribute
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: (name, default or null)
};

}  // namespace flover::jinja

#endif  // FLOVER_CHAT_JINJA_AST_H_
