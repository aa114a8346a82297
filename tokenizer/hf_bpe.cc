// HfTokenizer, part 3 of 4: BPE over each pre-tokenized word (merges by
// rank, byte fallback, unknown tokens) and Encode, the whole pipeline.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "tokenizer/hf_tokenizer_internal.h"
#include "tokenizer/unicode.h"
#include "util/status_macros.h"

namespace flover {

using hf_internal::CodePointAt;
using hf_internal::PairKey;
using hf_internal::Bytes;

void HfTokenizer::Bpe(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_ || (whole_newline_runs_ && word.find_first_not_of('\n') == absl::string_view::npos)) {
    if (auto it = model_vocab_.find(word); it != model_vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  // Symbols as a doubly linked list over a vector (the library's Word).
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id) {
    const int i = static_cast<int>(syms.size());
    syms.push_back({id, i - 1, i + 1, true});
  };
  bool unk_pending = false;
  for (size_t i = 0, n = 0; i < word.size(); i += n) {
    CodePointAt(word, i, &n);
    const absl::string_view c = word.substr(i, n);
    if (auto it = model_vocab_.find(c); it != model_vocab_.end()) {
      if (unk_pending) add(unk_id_), unk_pending = false;
      add(it->second);
      continue;
    }
    if (byte_fallback_ &&
        std::all_of(c.begin(), c.end(), [&](char b) { return byte_token_[static_cast<uint8_t>(b)] >= 0; })) {
      for (char b : c) add(byte_token_[static_cast<uint8_t>(b)]);
      continue;  // (a pending unknown stays pending, as in the library)
    }
    if (unk_id_ < 0) continue;  // no unknown token: the character is dropped
    if (unk_pending && !fuse_unk_) add(unk_id_);
    unk_pending = true;
  }
  if (unk_pending) add(unk_id_);
  if (syms.empty()) return;
  syms.back().next = -1;

  // Merges by rank, then position, skipping entries that went stale.
  struct Merge {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator<(const Merge& o) const {  // the top is the lowest (rank, pos)
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Merge> queue;
  auto lookup = [&](int pos, int next) {
    auto it = merges_.find(PairKey(syms[pos].id, syms[next].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) lookup(i, i + 1);
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Symbol& right = syms[cur.next];
    auto it = merges_.find(PairKey(cur.id, right.id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0) lookup(cur.prev, top.pos);
    if (cur.next >= 0) lookup(top.pos, cur.next);
  }
  for (int i = 0; i >= 0; i = syms[i].next) ids->push_back(syms[i].id);
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(absl::string_view text,
                                                        bool add_special_tokens) const {
  auto valid = DecodeUtf8(text);
  if (!valid.ok()) return valid.status();
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = template_before_;
  std::vector<std::pair<Piece, int32_t>> raw_parts;
  SplitAddedTokens({std::string(text), true}, /*normalized_pass=*/false, &raw_parts);
  for (auto& [part, id] : raw_parts) {
    if (id >= 0) {
      ids.push_back(id);
      continue;
    }
    std::vector<std::pair<Piece, int32_t>> parts;
    SplitAddedTokens({Normalize(part.text), part.at_start}, /*normalized_pass=*/true, &parts);
    for (auto& [p, pid] : parts) {
      if (pid >= 0) {
        ids.push_back(pid);
        continue;
      }
      std::vector<Piece> pieces{std::move(p)};
      FLOVER_RETURN_IF_ERROR(PreTokenize(&pieces));
      for (const Piece& w : pieces) Bpe(w.text, &ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), template_after_.begin(), template_after_.end());
  return ids;
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  for (const AddedToken& a : added_) {
    if (a.id == id) return a.special;
  }
  return false;
}

}  // namespace flover
