// A step crosses to the other ranks whole: rank 0's BroadcastStep is
// recorded on a tape and replayed to RunTensorParallelWorker, which runs it
// on a real StepExecutor. What it ran is then read back through the KV it
// wrote: a decode step after it, run directly, must see the prompt as
// rank 0 sent it (with its given input rows, and their horizons), bitwise.
#include "engine/tp_worker.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "model/model_loader.h"
#include "testing/backends.h"

namespace flover {
namespace {

// Rank 0's broadcasts, kept in order; the worker's side takes them back.
class Tape : public ControlChannel {
 public:
  const WorldConfig& world() const override { return world_; }
  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    if (recording) {
      messages.emplace_back(static_cast<const char*>(data), bytes);
      return absl::OkStatus();
    }
    if (messages.empty() || messages.front().size() != bytes) {
      return absl::DataLossError("the worker read a message rank 0 did not send");
    }
    std::memcpy(data, messages.front().data(), bytes);
    messages.pop_front();
    return absl::OkStatus();
  }
  void Abort(int) override {}

  bool recording = true;
  std::deque<std::string> messages;

 private:
  WorldConfig world_;
};

constexpr int kMaxSeq = 32;

std::unique_ptr<StepExecutor> Executor(CausalLm& model) {
  auto e = StepExecutor::Create(model, KvCacheOptions{}, 2, kMaxSeq, 64, 8, nullptr);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(TensorParallelWorkerTest, StepsWithGivenRowsArriveWhole) {
  std::string skip;
  auto backend = testing::BackendForTest("cpu", &skip);
  if (backend == nullptr) GTEST_SKIP() << skip;  // an ISA cap above this CPU
  auto loaded = LoadModel("tests/golden/llama_gqa");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend, **loaded);
  const int C = model->info().hidden;

  // The prompt's rows 2..4 given (any values: the worker must use them).
  StepInput prompt;
  prompt.batch.AddSequence(testing::SeqBlocks(1, kMaxSeq), 0, std::vector<int32_t>{5, 17, 42, 99, 7, 250});
  std::vector<float> rows(3 * C);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  prompt.batch.GiveRows(2, rows, C);
  prompt.batch.AttendTo(2, 3, 4);  // and attend to each other both ways (as Gemma 3's image rows)
  StepInput decode;
  decode.batch.AddSequence(testing::SeqBlocks(1, kMaxSeq), 6, std::vector<int32_t>{11});

  auto decode_after = [&](StepExecutor& e) {
    auto out = e.Run(decode);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? std::vector<float>(out->logits.begin(), out->logits.end()) : std::vector<float>();
  };
  // Directly, with and without the given rows.
  auto direct = Executor(*model);
  ASSERT_TRUE(direct->Run(prompt).ok());
  const std::vector<float> want = decode_after(*direct);
  StepInput plain = prompt;
  plain.batch.given.clear();
  plain.batch.embeds.clear();
  auto without = Executor(*model);
  ASSERT_TRUE(without->Run(plain).ok());
  ASSERT_NE(decode_after(*without), want);
  StepInput causal = prompt;
  causal.batch.attend_to.clear();
  auto one_way = Executor(*model);
  ASSERT_TRUE(one_way->Run(causal).ok());
  ASSERT_NE(decode_after(*one_way), want);

  // Through the tape: the step, then the stop.
  Tape tape;
  ASSERT_TRUE(BroadcastStep(tape, prompt).ok());
  ASSERT_TRUE(BroadcastStop(tape).ok());
  tape.recording = false;
  auto worker = Executor(*model);
  ASSERT_TRUE(RunTensorParallelWorker(*worker, tape).ok());
  EXPECT_TRUE(tape.messages.empty());
  const std::vector<float> got = decode_after(*worker);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace flover
