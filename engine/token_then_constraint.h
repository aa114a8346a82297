// A constraint that starts with one token: a special token that no text
// spells (so no byte-level grammar can write it) and then a grammar for
// what follows it. Mistral's tool calls are the case: [TOOL_CALLS], then a
// JSON list of calls (chat/tool_calls.h's ToolCallGrammar says when).
#ifndef FLOVER_ENGINE_TOKEN_THEN_CONSTRAINT_H_
#define FLOVER_ENGINE_TOKEN_THEN_CONSTRAINT_H_

#include <cstdint>
#include <memory>

#include "engine/constraint.h"

namespace flover {

// The output is `token` followed by what `then` allows; with `text_before`,
// any tokens may come first, the output may end before `token` (plain
// text), and `token`, once sampled, starts `then`. `token` must be below
// then->vocab_size().
std::shared_ptr<const CompiledConstraint> TokenThen(int32_t token, bool text_before,
                                                    std::shared_ptr<const CompiledConstraint> then);

// A reasoning budget: free text until the token that closes the reasoning
// (`close`, below vocab_size), which is the only token allowed once
// `budget` tokens came before it (so the reasoning ends, as llama.cpp's
// --reasoning-budget ends it); after it, what `then` allows (null:
// anything). The output may not end while the budget is spent and the
// reasoning open.
std::shared_ptr<const CompiledConstraint> ReasoningBudget(int32_t close, int budget, int vocab_size,
                                                          std::shared_ptr<const CompiledConstraint> then);

}  // namespace flover

#endif  // FLOVER_ENGINE_TOKEN_THEN_CONSTRAINT_H_
