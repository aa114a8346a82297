// What follows a sequence's output token by token, beside the engine: the
// text and its stop strings (engine/text_output.h); a constraint's matcher
// joins them the same way. The engine tells each observer of a sequence
// about every token it emits, in order, on the engine thread, before the
// sequence's sink hears of it, and once more when the sequence finishes.
#ifndef FLOVER_ENGINE_SEQUENCE_OBSERVER_H_
#define FLOVER_ENGINE_SEQUENCE_OBSERVER_H_

#include <cstdint>
#include <optional>

#include "engine/request.h"

namespace flover {

class SequenceObserver {
 public:
  virtual ~SequenceObserver() = default;
  // `token` was emitted; `end_of_sequence` when it ends the sequence as the
  // model's EOS does (no text). May fill in the event (its text), and
  // returns a finish reason when this token ends the sequence.
  virtual std::optional<FinishReason> OnToken(int32_t token, bool end_of_sequence,
                                              TokenEvent& event) = 0;
  // The sequence ends, for any reason: whatever was held back goes into
  // `event`.
  virtual void OnFinish(FinishEvent& event) = 0;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_SEQUENCE_OBSERVER_H_
