// TextOutput on its own, over a decoder whose pieces the test chooses: stop
// strings across pieces, held-back tails, UTF-8, and the end.
#include "engine/text_output.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace flover {
namespace {

// Token i decodes to pieces[i]; Finish gives `tail`.
class PieceStream final : public Tokenizer::TextStream {
 public:
  PieceStream(std::map<int32_t, std::string> pieces, std::string tail)
      : pieces_(std::move(pieces)), tail_(std::move(tail)) {}
  std::string Push(int32_t id) override { return pieces_.at(id); }
  std::string Finish() override { return tail_; }

 private:
  std::map<int32_t, std::string> pieces_;
  std::string tail_;
};

TextOutput Make(std::map<int32_t, std::string> pieces, std::vector<std::string> stops,
                std::string tail = "") {
  return TextOutput(std::make_unique<PieceStream>(std::move(pieces), std::move(tail)),
                    std::move(stops));
}

TEST(TextOutputTest, WithoutStopStringsEveryPieceIsReleasedAtOnce) {
  TextOutput out = Make({{1, "Hello"}, {2, ", world"}}, {}, "!");
  TokenEvent ev;
  EXPECT_FALSE(out.OnToken(1, false, ev).has_value());
  EXPECT_EQ(ev.text, "Hello");
  EXPECT_FALSE(out.OnToken(2, false, ev).has_value());
  EXPECT_EQ(ev.text, ", world");
  FinishEvent fin;
  out.OnFinish(fin);
  EXPECT_EQ(fin.text, "!");
}

TEST(TextOutputTest, AStopStringAcrossPiecesEndsTheTextBeforeIt) {
  TextOutput out = Make({{1, "one ST"}, {2, "OP two"}}, {"STOP"}, "never");
  TokenEvent a, b;
  EXPECT_FALSE(out.OnToken(1, false, a).has_value());
  EXPECT_EQ(a.text, "one");  // " ST" could still become "STOP": held back
  EXPECT_EQ(out.OnToken(2, false, b), FinishReason::kStop);
  EXPECT_EQ(b.text, " ");
  FinishEvent fin;
  out.OnFinish(fin);
  EXPECT_EQ(fin.text, "");  // nothing after the stop string, not the decoder's tail
}

TEST(TextOutputTest, AHeldTailThatNeverBecomesAStopStringComesOutAtTheEnd) {
  TextOutput out = Make({{1, "ab"}, {2, "c"}}, {"xyz"});
  TokenEvent a, b;
  out.OnToken(1, false, a);
  EXPECT_EQ(a.text, "");  // the last 2 bytes (the longest stop string less one) are held
  out.OnToken(2, false, b);
  EXPECT_EQ(b.text, "a");
  FinishEvent fin;
  out.OnFinish(fin);
  EXPECT_EQ(fin.text, "bc");
}

TEST(TextOutputTest, NeverSplitsAUtf8Character) {
  // "é" is two bytes; holding 3 bytes back would cut between them.
  TextOutput out = Make({{1, "x\xC3\xA9yz"}}, {"abcd"});
  TokenEvent ev;
  out.OnToken(1, false, ev);
  EXPECT_EQ(ev.text, "x");
  FinishEvent fin;
  out.OnFinish(fin);
  EXPECT_EQ(fin.text, "\xC3\xA9yz");
}

TEST(TextOutputTest, EndOfSequenceTokensHaveNoText) {
  TextOutput out = Make({{1, "a"}}, {});
  TokenEvent ev;
  EXPECT_FALSE(out.OnToken(9, true, ev).has_value());  // 9 is not even decodable
  EXPECT_EQ(ev.text, "");
}

}  // namespace
}  // namespace flover
