#include "engine/draft_verifier.h"

namespace flover {

void SampleAndAccept(const SequenceSampling& seq, const StepRows& rows, std::vector<int32_t>* history,
                     SampledTokens* out) {
  out->Clear();
  const bool greedy = rows.logits.empty();
  // Row j's penalties see the accepted tokens and the drafts before it,
  // which are the tokens taken so far whenever row j is reached.
  absl::Span<const int32_t> seen = seq.tokens;
  if (rows.rows > 1 && !greedy) {
    history->assign(seq.tokens.begin(), seq.tokens.end());
    history->insert(history->end(), seq.drafts.begin(), seq.drafts.begin() + (rows.rows - 1));
    seen = *history;
  }
  const size_t accepted = seq.tokens.size();
  for (int j = 0; j < rows.rows; ++j) {
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
    const int row = rows.first_row + j;
    const int32_t token =
        greedy ? rows.best[row]
               : seq.sampler->Sample(rows.logits.subspan(size_t(row) * rows.vocab, rows.vocab),
                                     seen.first(accepted + j), seq.logprobs ? &logprob : nullptr,
                                     seq.logprobs ? seq.top_logprobs : 0, &top);
    out->tokens.push_back(token);
    out->logprobs.push_back(logprob);
    out->top_logprobs.push_back(std::move(top));
    bool ends = seq.ends_as_eos(token);
    // A constraint advances here (in the step's parallel loop) and works
    // out what may follow: the next row's mask.
    if (seq.constraint != nullptr && !ends) {
      (void)seq.constraint->Accept(token);  // a refusal is kept in failed()
      ends = seq.constraint->failed() || !seq.constraint->CanContinue();
    }
    // Row j + 1 holds drafts[j]: it stands only if that is the token sampled here.
    if (ends || j + 1 >= rows.rows || seq.drafts[j] != token) break;
  }
}

}  // namespace flover
