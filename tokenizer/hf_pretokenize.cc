// HfTokenizer, part 2 of 4: the text before BPE — the normalizer, added
// tokens matched in the text, and the pre-tokenizer's steps (splits by
// regex or literal with the library's behaviors, ByteLevel, Metaspace,
// digits, punctuation), each as the tokenizers library applies it.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tokenizer/hf_tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace flover {
namespace {

using hf_internal::Piece;
using hf_internal::Bytes;
using hf_internal::Gpt2Regex;
using hf_internal::CodePointAt;
using hf_internal::IsWordChar;

// The start of the code point that ends at byte i (> 0).
size_t PreviousStart(absl::string_view s, size_t i) {
  do {
    --i;
  } while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

// Byte offsets where each code point of `s` starts, plus s.size().
std::vector<size_t> CharStarts(const std::vector<Utf8Char>& cs, size_t size) {
  std::vector<size_t> starts;
  starts.reserve(cs.size() + 1);
  for (const Utf8Char& c : cs) starts.push_back(c.begin);
  starts.push_back(size);
  return starts;
}

// The library's split of one piece at (range, is_match) pairs covering it.
void ApplyBehavior(const Piece& piece, std::vector<std::pair<std::pair<size_t, size_t>, bool>> m,
                   HfTokenizer::PreTokenizerStep::Behavior behavior, bool invert,
                   std::vector<Piece>* out) {
  using Step = HfTokenizer::PreTokenizerStep;
  if (invert) {
    for (auto& [range, is_match] : m) is_match = !is_match;
  }
  // (range, remove) after the behavior.
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> splits;
  bool previous = false;
  switch (behavior) {
    case Step::kIsolated:
      for (auto& [range, is_match] : m) splits.push_back({range, false});
      break;
    case Step::kRemoved:
      splits = m;
      break;
    case Step::kContiguous:
      for (auto& [range, is_match] : m) {
        if (is_match == previous && !splits.empty()) {
          splits.back().first.second = range.second;
        } else {
          splits.push_back({range, false});
        }
        previous = is_match;
      }
      break;
    case Step::kMergedWithPrevious:
      for (auto& [range, is_match] : m) {
        if (is_match && !previous && !splits.empty()) {
          splits.back().first.second = range.second;
        } else {
          splits.push_back({range, false});
        }
        previous = is_match;
      }
      break;
    case Step::kMergedWithNext:
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->second && !previous && !splits.empty()) {
          splits.back().first.first = it->first.first;
        } else {
          splits.push_back({it->first, false});
        }
        previous = it->second;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (const auto& [range, remove] : splits) {
    if (remove || range.first == range.second) continue;
    out->push_back({piece.text.substr(range.first, range.second - range.first),
                    piece.at_start && range.first == 0});
  }
}

// Covers `s` with (range, is_match) pairs at the literal's occurrences.
std::vector<std::pair<std::pair<size_t, size_t>, bool>> LiteralMatches(absl::string_view s,
                                                                      absl::string_view lit) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> m;
  size_t prev = 0;
  for (size_t at = s.find(lit); !lit.empty() && at != absl::string_view::npos;
       at = s.find(lit, at + lit.size())) {
    if (at > prev) m.push_back({{prev, at}, false});
    m.push_back({{at, at + lit.size()}, true});
    prev = at + lit.size();
  }
  if (prev < s.size() || m.empty()) m.push_back({{prev, s.size()}, false});
  return m;
}

absl::StatusOr<std::vector<std::pair<std::pair<size_t, size_t>, bool>>> RegexMatches(
    absl::string_view s, const SplitRegex& re) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> m;
  auto cs = DecodeUtf8(s);
  if (!cs.ok()) return cs.status();
  std::vector<char32_t> cps;
  cps.reserve(cs->size());
  for (const Utf8Char& c : *cs) cps.push_back(c.cp);
  const std::vector<size_t> at = CharStarts(*cs, s.size());
  size_t prev = 0, from = 0, b = 0, e = 0;
  while (true) {
    auto found = re.Find(cps, from, &b, &e);
    if (!found.ok()) return found.status();
    if (!*found) break;
    if (b > prev) m.push_back({{at[prev], at[b]}, false});
    m.push_back({{at[b], at[e]}, true});
    prev = from = e;
  }
  if (prev < cps.size() || m.empty()) m.push_back({{at[prev], s.size()}, false});
  return m;
}

}  // namespace

std::string HfTokenizer::Normalize(absl::string_view in) const {
  std::string s(in);
  for (const NormalizerStep& n : normalizer_) {
    if (n.kind == NormalizerStep::kPrepend) {
      if (!s.empty()) s = absl::StrCat(n.a, s);
    } else if (n.kind == NormalizerStep::kNfc) {
      s = NfcNormalize(s);
    } else {
      s = absl::StrReplaceAll(s, {{n.a, n.b}});
    }
  }
  return s;
}

void HfTokenizer::SplitAddedTokens(const Piece& piece, bool normalized_pass,
                                   std::vector<std::pair<Piece, int32_t>>* out) const {
  const std::string& s = piece.text;
  const auto& patterns = added_patterns_[normalized_pass ? 1 : 0];
  size_t start_offset = 0, pos = 0;
  while (pos < s.size()) {
    // Leftmost-longest: the first position where a pattern matches, and the
    // longest pattern there.
    size_t at = pos, len = 0;
    int index = -1;
    for (; at < s.size() && index < 0; ++at) {
      for (const auto& [pattern, i] : patterns[static_cast<uint8_t>(s[at])]) {
        if (s.compare(at, pattern.size(), pattern) == 0) {
          index = i;
          len = pattern.size();
          break;
        }
      }
    }
    if (index < 0) break;
    size_t start = at - 1, stop = start + len;
    pos = stop;
    const AddedToken& tok = added_[index];
    size_t n;
    if (tok.single_word) {
      const bool word_before = start > 0 && IsWordChar(CodePointAt(s, PreviousStart(s, start), &n));
      const bool word_after = stop < s.size() && IsWordChar(CodePointAt(s, stop, &n));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t b = start;
      while (b > 0) {
        const size_t p = PreviousStart(s, b);
        if (!IsSpace(CodePointAt(s, p, &n))) break;
        b = p;
      }
      start = std::max(b, start_offset);
    }
    if (tok.rstrip) {
      while (stop < s.size() && IsSpace(CodePointAt(s, stop, &n))) stop += n;
      pos = stop;
    }
    if (start < start_offset) continue;
    if (start_offset < start) {
      out->push_back({{s.substr(start_offset, start - start_offset),
                       piece.at_start && start_offset == 0},
                      -1});
    }
    out->push_back({{s.substr(start, stop - start), false}, tok.id});
    start_offset = stop;
  }
  if (start_offset < s.size()) {
    out->push_back({{s.substr(start_offset), piece.at_start && start_offset == 0}, -1});
  }
}

absl::Status HfTokenizer::PreTokenize(std::vector<Piece>* pieces) const {
  for (const PreTokenizerStep& step : pre_tokenizer_) {
    std::vector<Piece> next;
    next.reserve(pieces->size());
    for (Piece& piece : *pieces) {
      switch (step.kind) {
        case PreTokenizerStep::kByteLevel: {
          if (step.add_prefix_space && !absl::StartsWith(piece.text, " ")) {
            piece.text.insert(0, " ");
          }
          std::vector<Piece> words;
          if (step.use_regex) {
            auto m = RegexMatches(piece.text, Gpt2Regex());
            if (!m.ok()) return m.status();
            ApplyBehavior(piece, std::move(*m), PreTokenizerStep::kIsolated, false, &words);
          } else if (!piece.text.empty()) {
            words.push_back(std::move(piece));
          }
          for (Piece& w : words) {
            std::string symbols;
            symbols.reserve(w.text.size() * 2);
            for (char c : w.text) symbols += Bytes().of_byte[static_cast<uint8_t>(c)];
            next.push_back({std::move(symbols), w.at_start});
          }
          break;
        }
        case PreTokenizerStep::kSplit: {
          if (step.regex) {
            auto m = RegexMatches(piece.text, *step.regex);
            if (!m.ok()) return m.status();
            ApplyBehavior(piece, std::move(*m), step.behavior, step.invert, &next);
          } else {
            ApplyBehavior(piece, LiteralMatches(piece.text, step.literal), step.behavior,
                          step.invert, &next);
          }
          break;
        }
        case PreTokenizerStep::kMetaspace: {
          Piece p{absl::StrReplaceAll(piece.text, {{" ", step.replacement}}), piece.at_start};
          const bool prepend = step.prepend == PreTokenizerStep::kAlways ||
                               (step.prepend == PreTokenizerStep::kFirst && p.at_start);
          if (prepend && !absl::StartsWith(p.text, step.replacement)) {
            p.text.insert(0, step.replacement);
          }
          if (step.split) {
            ApplyBehavior(p, LiteralMatches(p.text, step.replacement),
                          PreTokenizerStep::kMergedWithNext, false, &next);
          } else if (!p.text.empty()) {
            next.push_back(std::move(p));
          }
          break;
        }
      }
    }
    *pieces = std::move(next);
  }
  return absl::OkStatus();
}

}  // namespace flover
