// flover_server through real gRPC calls on loopback: every error code with a
// message naming the field, cancellation and disconnects freeing slots,
// deadlines while queued and running, draining on SIGTERM, and 1,000
// concurrent streams.
#include <grpcpp/grpcpp.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "kernels/backend_factory.h"
#include "proto/flover.grpc.pb.h"
#include "testing/files.h"
#include "util/json.h"
#include "testing/backends.h"
#include "tests/server/server_process.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;

std::string g_server, g_client, g_loadgen;

class ServerTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--model=builtin:tiny", "--threads=1"});
    server_ = std::make_unique<ServerProcess>(g_server, flags);
    ASSERT_TRUE(server_->ok()) << "server did not start";
    stub_ = v1::Flover::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  // Eight requests (some greedy, some seeded sampling) sent at once, which the
  // server fuses as they overlap, give the tokens each gives alone.
  void ExpectFusionKeepsRequestsIndependent() {
    std::vector<v1::GenerateRequest> requests;
    for (int i = 0; i < 8; ++i) {
      std::vector<uint32_t> prompt;
      for (int t = 0; t < 3 + 9 * i; ++t) prompt.push_back((37 * i + 11 * t) % 512);
      v1::GenerateRequest r = Ids(prompt, 12 + i);
      if (i % 2 == 1) {
        r.mutable_sampling()->set_temperature(0.8f);
        r.mutable_sampling()->set_seed(100 + i);
      }
      requests.push_back(r);
    }
    std::vector<std::vector<uint32_t>> fused(requests.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back([&, i] {
        const auto [status, ids] = Generate(requests[i]);
        EXPECT_TRUE(status.ok()) << status.error_message();
        fused[i] = ids;
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto [status, alone] = Generate(requests[i]);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(fused[i], alone) << "request " << i;
      EXPECT_EQ(alone.size(), size_t(12 + i));
    }
  }

  static v1::GenerateRequest Ids(std::vector<uint32_t> ids, int max_new) {
    v1::GenerateRequest r;
    for (uint32_t id : ids) r.mutable_token_ids()->add_ids(id);
    r.mutable_stopping()->set_max_new_tokens(max_new);
    r.mutable_stopping()->set_ignore_eos(true);
    r.mutable_sampling()->set_temperature(0);
    return r;
  }

  // Runs a request to the end; returns the status and the tokens received.
  std::pair<grpc::Status, std::vector<uint32_t>> Generate(const v1::GenerateRequest& r,
                                                          double timeout_s = 60) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(int64_t(timeout_s * 1000)));
    auto reader = stub_->Generate(&ctx, r);
    v1::GenerateResponse resp;
    std::vector<uint32_t> ids;
    while (reader->Read(&resp)) ids.insert(ids.end(), resp.token_ids().begin(), resp.token_ids().end());
    return {reader->Finish(), ids};
  }

  v1::Stats Stats() {
    grpc::ClientContext ctx;
    v1::Stats s;
    EXPECT_TRUE(stub_->GetStats(&ctx, v1::GetStatsRequest(), &s).ok());
    return s;
  }

  // Polls GetStats until `pred` holds (up to 10 s).
  template <typename Pred>
  bool StatsEventually(Pred pred) {
    for (int i = 0; i < 1000; ++i) {
      if (pred(Stats())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // A golden.json's greedy prompt and transformers' continuation of it.
  static std::pair<std::vector<uint32_t>, std::vector<uint32_t>> GoldenGreedy(const std::string& path) {
    std::vector<uint32_t> prompt, want;
    auto golden = ParseJsonObject(testing::ReadFileOrEmpty(path), path);
    EXPECT_TRUE(golden.ok()) << golden.status();
    if (!golden.ok()) return {prompt, want};
    for (const auto& v : golden->fields().at("greedy_prompt").list_value().values()) {
      prompt.push_back(static_cast<uint32_t>(v.number_value()));
    }
    for (const auto& v : golden->fields().at("greedy_output").list_value().values()) {
      want.push_back(static_cast<uint32_t>(v.number_value()));
    }
    return {prompt, want};
  }

  void ExpectError(const v1::GenerateRequest& r, grpc::StatusCode code, const std::string& text) {
    const auto [status, ids] = Generate(r);
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(text));
    EXPECT_TRUE(ids.empty());
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<v1::Flover::Stub> stub_;
};

TEST_F(ServerTest, GeneratesAndReportsModelInfo) {
  Start({"--max_seq_len=256"});
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.architecture(), "gpt2");
  EXPECT_EQ(info.n_layer(), 2u);
  EXPECT_EQ(info.vocab_size(), 512u);
  EXPECT_EQ(info.max_seq_len(), 256u);
  EXPECT_EQ(info.tp_size(), 1u);
  EXPECT_FALSE(info.has_tokenizer());
  EXPECT_EQ(info.scheduler(), "fusion");
  EXPECT_EQ(info.matmul_dtype(), "f32");
  EXPECT_EQ(info.kv_dtype(), "f32");
  EXPECT_EQ(info.device(), "cpu");
  EXPECT_NE(info.device_name().find("threads"), std::string::npos) << info.device_name();
  EXPECT_EQ(info.device_memory_bytes(), 0u);

  grpc::ClientContext gctx;
  auto reader = stub_->Generate(&gctx, Ids({1, 2, 3}, 12));
  v1::GenerateResponse resp, last;
  int tokens = 0;
  while (reader->Read(&resp)) {
    tokens += resp.token_ids_size();
    last = resp;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 12);
  EXPECT_EQ(last.finish_reason(), v1::LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), 3u);
  EXPECT_EQ(last.usage().generated_tokens(), 12u);
  EXPECT_FALSE(last.request_id().empty());
}

TEST_F(ServerTest, InvalidArgumentsNameTheField) {
  Start({"--max_seq_len=64", "--max_new_tokens_limit=50"});
  const auto INVALID = grpc::StatusCode::INVALID_ARGUMENT;
  ExpectError(v1::GenerateRequest(), INVALID, "prompt: is empty");
  ExpectError(Ids({}, 4), INVALID, "prompt: is empty");
  ExpectError(Ids({1, 512}, 4), INVALID, "token_ids: id 512 at index 1");
  ExpectError(Ids(std::vector<uint32_t>(40, 1), 30), INVALID, "exceeds max_seq_len (64)");
  v1::GenerateRequest r = Ids({1}, 4);
  r.mutable_sampling()->set_temperature(-0.5);
  ExpectError(r, INVALID, "temperature");
  r = Ids({1}, 4);
  r.mutable_sampling()->set_top_p(0);
  ExpectError(r, INVALID, "top_p");
  r.mutable_sampling()->set_top_p(1.5);
  ExpectError(r, INVALID, "top_p");
  r = Ids({1}, 4);
  r.mutable_sampling()->set_top_k(-1);
  ExpectError(r, INVALID, "top_k");
  ExpectError(Ids({1}, 0), INVALID, "max_new_tokens");
  ExpectError(Ids({1}, 51), INVALID, "max_new_tokens");
  r = Ids({1}, 4);
  r.set_text("hello");
  ExpectError(r, INVALID, "text: the model has no tokenizer");
  r = Ids({1}, 4);
  r.mutable_stopping()->add_stop_strings("x");
  ExpectError(r, INVALID, "stop_strings");
  r = Ids({1}, 4);
  r.mutable_constraint()->mutable_choice()->add_choices("yes");
  ExpectError(r, INVALID, "choice: the model has no tokenizer");
  r = Ids({1}, 4);
  r.set_request_id(std::string(257, 'r'));  // echoed in every message: bounded
  ExpectError(r, INVALID, "request_id: at most 256 bytes, got 257");
  EXPECT_EQ(Stats().requests_submitted(), 0u);
}

TEST_F(ServerTest, FullQueueIsResourceExhausted) {
  Start({"--scheduler=dynamic", "--batch_delay_ms=600000", "--max_queue=2"});
  grpc::ClientContext c1, c2;
  auto r1 = stub_->Generate(&c1, Ids({1}, 4));
  auto r2 = stub_->Generate(&c2, Ids({2}, 4));
  ASSERT_TRUE(StatsEventually([](const v1::Stats& s) { return s.queue_length() == 2; }));
  ExpectError(Ids({3}, 4), grpc::StatusCode::RESOURCE_EXHAUSTED, "queue is full");
  c1.TryCancel();
  c2.TryCancel();
}

TEST_F(ServerTest, CancelMidStreamFreesTheSlot) {
  // GPT-2-small shapes: 200 tokens take seconds, so the cancel lands mid-stream.
  Start({"--model=builtin:gpt2-small", "--max_seq_len=256", "--max_batch=2", "--threads=2"});
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Ids({1, 2}, 200));
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(Stats().active_sequences(), 1u);
  ctx.TryCancel();
  while (reader->Read(&resp)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(StatsEventually([](const v1::Stats& s) {
    return s.active_sequences() == 0 && s.kv_bytes_in_use() == 0 &&
           s.requests_finished().at("cancelled") == 1;
  }));
}

TEST_F(ServerTest, ClientDisconnectFreesTheSlot) {
  // GPT-2-small shapes: 200 tokens take seconds, so the client is killed
  // mid-stream.
  Start({"--model=builtin:gpt2-small", "--max_seq_len=256", "--max_batch=2", "--threads=2"});
  const pid_t client = testing::Spawn(
      {g_client, "--target=" + server_->address(), "--prompt_ids=5,6", "--max_new_tokens=200",
       "--ignore_eos", "--temperature=0"},
      nullptr);
  ASSERT_GT(client, 0);
  ASSERT_TRUE(StatsEventually([](const v1::Stats& s) {
    return s.active_sequences() == 1 && s.tokens_generated() > 0;
  }));
  kill(client, SIGKILL);
  testing::WaitExit(client, std::chrono::seconds(5));
  EXPECT_TRUE(StatsEventually([](const v1::Stats& s) {
    return s.active_sequences() == 0 && s.kv_bytes_in_use() == 0 &&
           s.requests_finished().at("cancelled") == 1;
  }));
  EXPECT_LT(Stats().tokens_generated(), 200u);
  // The abandoned call is finished too: the server drains and exits at once.
  EXPECT_EQ(server_->Stop(std::chrono::seconds(10)), 0);
}

TEST_F(ServerTest, DeadlineWhileQueuedAndWhileRunning) {
  // GPT-2-small shapes (~15 ms a token here), so deadlines land mid-stream.
  Start({"--model=builtin:gpt2-small", "--scheduler=sequential", "--max_seq_len=256",
         "--max_batch=2", "--threads=2"});
  // A long request holds the only place; the next one expires in the queue.
  grpc::ClientContext long_ctx;
  auto long_reader = stub_->Generate(&long_ctx, Ids({1, 2}, 200));
  v1::GenerateResponse resp;
  ASSERT_TRUE(long_reader->Read(&resp));
  auto [queued, queued_ids] = Generate(Ids({3}, 4), /*timeout_s=*/0.1);
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(queued_ids.empty());
  long_ctx.TryCancel();
  while (long_reader->Read(&resp)) {
  }
  long_reader->Finish();
  // A running request whose deadline passes mid-generation: a deadline
  // that expires before the first token (a slow machine, a sanitizer) is
  // tried again twice as long, until one lands between the first token and
  // the last; at most 7 tries (0.25 s to 16 s), whatever the machine's speed.
  int expired = 1;  // requests ended by a deadline or the cancel before it
  size_t got = 0;
  for (double timeout_s = 0.25; timeout_s <= 16; timeout_s *= 2) {
    auto [running, running_ids] = Generate(Ids({4, 5}, 200), timeout_s);
    ASSERT_EQ(running.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << "200 tokens within " << timeout_s << " s";
    ++expired;
    got = running_ids.size();
    if (got > 0) break;
  }
  EXPECT_GT(got, 0u) << "no deadline landed after the first token";
  EXPECT_LT(got, 200u);
  EXPECT_TRUE(StatsEventually([](const v1::Stats& s) {
    return s.active_sequences() == 0 && s.queue_length() == 0;
  }));
  const v1::Stats s = Stats();
  // The engine dropped every one (as deadline or as the cancel that follows it).
  EXPECT_EQ(s.requests_finished().at("deadline") + s.requests_finished().at("cancelled"),
            static_cast<uint64_t>(expired + 1));
  EXPECT_LT(s.tokens_generated(), 200u * expired);
  EXPECT_EQ(server_->Stop(std::chrono::seconds(10)), 0);
}

TEST_F(ServerTest, SigtermDrainsInFlightRefusesNewAndExitsZero) {
  // GPT-2-small shapes, so the in-flight request is still running (about a
  // second) when the late one arrives. The drain timeout is only an upper
  // bound (the drain ends with the request): under ThreadSanitizer these 80
  // tokens took over 60 s.
  Start({"--model=builtin:gpt2-small", "--max_seq_len=128", "--max_batch=4",
         "--drain_timeout_s=600", "--threads=2"});
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Ids({1, 2}, 80));
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  int tokens = resp.token_ids_size();
  server_->Signal(SIGTERM);
  // Requests sent until the server has taken the signal still run; once it
  // has, they are refused. Waits for that condition (bounded), not a time.
  grpc::Status late;
  for (int i = 0; i < 1000; ++i) {
    late = Generate(Ids({3}, 4)).first;
    if (late.error_code() == grpc::StatusCode::UNAVAILABLE) break;
    ASSERT_TRUE(late.ok()) << late.error_message();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(late.error_code(), grpc::StatusCode::UNAVAILABLE) << late.error_message();
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&resp)) {
    tokens += resp.token_ids_size();
    if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish = resp.finish_reason();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 80);
  EXPECT_EQ(finish, v1::LENGTH);
  EXPECT_EQ(server_->Wait(std::chrono::seconds(30)), 0);
}

// A Llama directory (grouped-query attention, llama3 rope scaling) served by
// the real binary: reported as such, and a greedy request's tokens are
// transformers' greedy continuation (tests/golden/llama_gqa/golden.json),
// also while fused with other requests.
TEST_F(ServerTest, ServesALlamaDirectoryAsTransformersDoes) {
  Start({"--model=tests/golden/llama_gqa", "--max_seq_len=96"});
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.n_head(), 4u);
  EXPECT_EQ(info.n_kv_head(), 2u);
  EXPECT_EQ(info.vocab_size(), 301u);
  ASSERT_EQ(info.eos_token_ids_size(), 1);
  EXPECT_EQ(info.eos_token_ids(0), 2);

  const auto [prompt, want] = GoldenGreedy("tests/golden/llama_gqa/golden.json");
  ASSERT_FALSE(want.empty());
  // Alone, then beside two other requests in flight.
  EXPECT_EQ(Generate(Ids(prompt, 32)).second, want);
  std::vector<std::thread> others;
  for (int i = 0; i < 2; ++i) {
    others.emplace_back([&, i] { Generate(Ids({uint32_t(5 + i), 7, 11}, 40)); });
  }
  EXPECT_EQ(Generate(Ids(prompt, 32)).second, want);
  for (auto& t : others) t.join();
}

// Phi-3.5's LongRoPE served by the real binary: to its original context (64
// positions here) with the short factors by default, as transformers within
// it (tests/golden/phi3_longrope_tiny); with --max_seq_len past it, the long
// factors at every position, as transformers past it
// (tests/golden/phi3_longrope_long: the same checkpoint).
TEST_F(ServerTest, ServesLongRopePastItsOriginalContextWhenAsked) {
  const std::string dir = "tests/golden/phi3_longrope_long";
  const auto [prompt, short_want] = GoldenGreedy("tests/golden/phi3_longrope_tiny/golden.json");
  const auto [long_prompt, long_want] = GoldenGreedy(dir + "/golden.json");
  ASSERT_EQ(prompt, long_prompt);
  ASSERT_NE(short_want, long_want);
  std::vector<uint32_t> past(100);
  for (size_t i = 0; i < past.size(); ++i) past[i] = static_cast<uint32_t>((7 * i + 3) % 319);

  Start({"--model=" + dir});
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.max_positions(), 64u);
  }
  EXPECT_EQ(Generate(Ids(prompt, 32)).second, short_want);
  ExpectError(Ids(past, 1), grpc::StatusCode::INVALID_ARGUMENT, "exceeds max_seq_len (64)");
  server_.reset();

  Start({"--model=" + dir, "--max_seq_len=256"});
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.max_positions(), 256u);
  }
  EXPECT_EQ(Generate(Ids(prompt, 32)).second, long_want);
  const auto [status, ids] = Generate(Ids(past, 20));
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ids.size(), 20u);
}

// A Llama directory with a SentencePiece-style tokenizer.json and a
// generation_config.json: text prompts in, text out, as transformers and the
// tokenizers library give them (tests/golden/llama_text/golden_text.json),
// alone and all at once.
TEST_F(ServerTest, ServesLlamaTextAsTransformersDoes) {
  Start({"--model=tests/golden/llama_text", "--max_seq_len=128"});
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_TRUE(info.has_tokenizer());
  // generation_config.json's list, over config.json's single id.
  EXPECT_THAT(std::vector<uint32_t>(info.eos_token_ids().begin(), info.eos_token_ids().end()),
              ::testing::ElementsAre(2u, 7u));

  auto golden = ParseJsonObject(
      testing::ReadFileOrEmpty("tests/golden/llama_text/golden_text.json"), "golden_text.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const int steps = static_cast<int>(golden->fields().at("steps").number_value());
  struct Case {
    std::string text, want_text;
    std::vector<uint32_t> want_ids;
    uint32_t prompt_tokens;
    std::vector<uint32_t> ids;
    std::string got_text;
    uint32_t got_prompt_tokens = 0;
    grpc::Status status;
  };
  std::vector<Case> cases;
  for (const auto& v : golden->fields().at("cases").list_value().values()) {
    const auto& f = v.struct_value().fields();
    Case c;
    c.text = f.at("text").string_value();
    c.want_text = f.at("output_text").string_value();
    for (const auto& id : f.at("output_ids").list_value().values()) {
      c.want_ids.push_back(static_cast<uint32_t>(id.number_value()));
    }
    c.prompt_tokens = f.at("prompt_ids").list_value().values_size();
    cases.push_back(std::move(c));
  }
  ASSERT_GE(cases.size(), 4u);
  auto run = [&](Case& c) {
    v1::GenerateRequest r;
    r.set_text(c.text);
    r.mutable_sampling()->set_temperature(0);
    r.mutable_stopping()->set_max_new_tokens(steps);
    r.mutable_stopping()->set_ignore_eos(true);
    grpc::ClientContext gctx;
    auto reader = stub_->Generate(&gctx, r);
    v1::GenerateResponse resp;
    c.ids.clear();
    c.got_text.clear();
    while (reader->Read(&resp)) {
      c.ids.insert(c.ids.end(), resp.token_ids().begin(), resp.token_ids().end());
      c.got_text += resp.text();
      if (resp.has_usage()) c.got_prompt_tokens = resp.usage().prompt_tokens();
    }
    c.status = reader->Finish();
  };
  auto check = [](const Case& c) {
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_EQ(c.got_prompt_tokens, c.prompt_tokens) << c.text;  // BOS + the text's tokens
    EXPECT_EQ(c.ids, c.want_ids) << c.text;
    EXPECT_EQ(c.got_text, c.want_text) << c.text;
  };
  for (Case& c : cases) {
    run(c);
    check(c);
  }
  // All at once: fused into shared steps, each still as alone.
  std::vector<std::thread> threads;
  for (Case& c : cases) threads.emplace_back([&run, &c] { run(c); });
  for (auto& t : threads) t.join();
  for (const Case& c : cases) check(c);
}

// The text path end to end, on the fixture model that has a tokenizer:
// text prompts, streamed text, logprobs, stop tokens, and --dataset.
TEST_F(ServerTest, TextPromptsLogprobsStopTokensAndDataset) {
  Start({"--model=tests/golden/tiny_f32", "--max_seq_len=40"});
  v1::GenerateRequest r;
  r.set_text("Hello world");  // 9 tokens with the fixture vocabulary (tokenizer golden)
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_new_tokens(8);
  r.mutable_stopping()->set_ignore_eos(true);
  r.set_return_logprobs(true);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, r);
  v1::GenerateResponse resp, last;
  std::vector<uint32_t> ids;
  std::string text;
  int logprobs = 0;
  while (reader->Read(&resp)) {
    ids.insert(ids.end(), resp.token_ids().begin(), resp.token_ids().end());
    text += resp.text();
    for (float lp : resp.logprobs()) {
      EXPECT_LE(lp, 0.0f);
      ++logprobs;
    }
    last = resp;
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_EQ(logprobs, 8);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(last.usage().prompt_tokens(), 9u);

  // A choice constraint over gRPC: the text is one of the choices.
  for (float temperature : {0.0f, 1.5f}) {
    v1::GenerateRequest choice = r;
    choice.mutable_sampling()->set_temperature(temperature);
    choice.mutable_stopping()->set_ignore_eos(false);
    // Room for the longest choice however it is spelled (a token is at
    // least a byte: "Hello there" takes at most 11), whatever the draw.
    choice.mutable_stopping()->set_max_new_tokens(16);
    for (const char* c : {"yes", "no", "Hello there"}) {
      choice.mutable_constraint()->mutable_choice()->add_choices(c);
    }
    grpc::ClientContext choice_ctx;
    auto choice_reader = stub_->Generate(&choice_ctx, choice);
    std::string choice_text;
    v1::FinishReason choice_finish = v1::FINISH_REASON_UNSPECIFIED;
    while (choice_reader->Read(&resp)) {
      choice_text += resp.text();
      if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) choice_finish = resp.finish_reason();
    }
    ASSERT_TRUE(choice_reader->Finish().ok());
    EXPECT_THAT(choice_text, ::testing::AnyOf("yes", "no", "Hello there"));
    EXPECT_EQ(choice_finish, v1::STOP);
  }
  v1::GenerateRequest empty_choice = r;
  empty_choice.mutable_constraint()->mutable_choice();
  ExpectError(empty_choice, grpc::StatusCode::INVALID_ARGUMENT, "choice: must list at least one");

  // Stop at the third token's id: STOP, and the output ends with it.
  v1::GenerateRequest stop = r;
  stop.mutable_stopping()->add_stop_token_ids(ids[2]);
  grpc::ClientContext stop_ctx;
  auto stop_reader = stub_->Generate(&stop_ctx, stop);
  std::vector<uint32_t> stop_ids;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  while (stop_reader->Read(&resp)) {
    stop_ids.insert(stop_ids.end(), resp.token_ids().begin(), resp.token_ids().end());
    if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish = resp.finish_reason();
  }
  ASSERT_TRUE(stop_reader->Finish().ok());
  EXPECT_EQ(finish, v1::STOP);
  const auto first = std::find(ids.begin(), ids.end(), ids[2]);
  EXPECT_EQ(stop_ids, std::vector<uint32_t>(ids.begin(), first + 1));

  // The load client reading prompts from a JSONL dataset.
  const std::string dir = std::getenv("TEST_TMPDIR");
  {
    std::ofstream data(dir + "/prompts.jsonl");
    data << "{\"prompt\": \"The quick brown fox\"}\n"
         << "{\"prompt_ids\": [1, 2, 3], \"max_new_tokens\": 4}\n";
  }
  const int code = testing::RunCommand(
      {g_loadgen, "--target=" + server_->address(), "--rate=inf", "--num_requests=6",
       "--dataset=" + dir + "/prompts.jsonl", "--output_len=5", "--progress=false",
       "--dump_outputs=" + dir + "/dump.jsonl"});
  EXPECT_EQ(code, 0);
  std::ifstream dump(dir + "/dump.jsonl");
  std::string line;
  int lines = 0, with_text = 0;
  while (std::getline(dump, line)) {
    ++lines;
    with_text += line.find("\"prompt_text\": \"The quick brown fox\"") != std::string::npos;
    EXPECT_NE(line.find("\"status\": \"OK\""), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 6);
  EXPECT_EQ(with_text, 3);  // lines alternate between the two prompts
}

// Device flags that cannot run stop the server at start: an unknown device,
// f16 on the CPU, one named GPU for several tensor-parallel ranks and, on a
// host without a GPU, --device=cuda.
TEST_F(ServerTest, DevicesThatCannotRunStopTheServer) {
  std::vector<std::vector<std::string>> bad = {
      {"--device=tpu"}, {"--dtype=f16"}, {"--device=cuda:0", "--tp=2"}};
  kernels::BackendOptions cuda;
  cuda.device = "cuda";
  if (!kernels::CreateBackend(cuda).ok()) bad.push_back({"--device=cuda"});
  for (const auto& flags : bad) {
    std::vector<std::string> args = {g_server, "--model=builtin:tiny", "--listen=127.0.0.1:0"};
    args.insert(args.end(), flags.begin(), flags.end());
    EXPECT_NE(testing::RunCommand(args, std::chrono::seconds(60)), 0) << flags[0];
  }
}

// --dtype=bf16 and --kv_dtype=bf16 are reported, the KV cache is half the
// size, and a request's tokens still do not depend on what it was fused
// with. An unknown --dtype or --kv_dtype, or fp8 KV on the CPU, stops the
// server at start.
TEST_F(ServerTest, Bf16LinearLayersAndKvCacheKeepRequestsIndependent) {
  for (const char* bad : {"--dtype=fp8", "--kv_dtype=int4", "--kv_dtype=fp8"}) {
    EXPECT_NE(testing::RunCommand({g_server, "--model=builtin:tiny", "--listen=127.0.0.1:0", bad},
                                  std::chrono::seconds(60)),
              0)
        << bad;
  }
  if (absl::Status st = testing::CpuSupports(kernels::MatmulDtype::kBF16); !st.ok()) {
    GTEST_SKIP() << st.message();
  }
  Start({"--dtype=bf16", "--kv_dtype=bf16", "--max_seq_len=128", "--threads=2"});
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.matmul_dtype(), "bf16");
  EXPECT_EQ(info.kv_dtype(), "bf16");
  // K and V, every layer and slot, 128 positions of n_embd 2-byte values.
  EXPECT_EQ(Stats().kv_bytes_total(),
            uint64_t{2} * info.n_layer() * info.max_batch() * 128 * info.n_embd() * 2);

  ExpectFusionKeepsRequestsIndependent();
}

// --dtype=int8 is reported, and fused requests still give what they give
// alone (integer sums: invariant by construction). A CPU without AVX-512
// VNNI refuses it at start, naming it.
TEST_F(ServerTest, Int8LinearLayersKeepRequestsIndependent) {
  if (absl::Status st = testing::CpuSupports(kernels::MatmulDtype::kInt8); !st.ok()) {
    EXPECT_NE(testing::RunCommand({g_server, "--model=builtin:tiny", "--listen=127.0.0.1:0",
                                   "--dtype=int8"},
                                  std::chrono::seconds(60)),
              0);
    GTEST_SKIP() << st.message();
  }
  Start({"--dtype=int8", "--max_seq_len=128", "--threads=2"});
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.matmul_dtype(), "int8");
  EXPECT_EQ(info.kv_dtype(), "f32");
  ExpectFusionKeepsRequestsIndependent();
}

TEST_F(ServerTest, LoadClientReportsGoodputAgainstItsObjectives) {
  Start({"--max_seq_len=64", "--max_batch=8", "--threads=2"});
  const std::string dir = std::getenv("TEST_TMPDIR");
  // Report fields of one bursty run with the given objectives.
  auto run = [&](const std::string& slo) {
    const std::string json = dir + "/goodput.json";
    std::remove(json.c_str());
    const int code = testing::RunCommand(
        {g_loadgen, "--target=" + server_->address(), "--rate=50", "--burstiness=0.5",
         "--num_requests=12", "--prompt_len=4", "--output_len=6", "--ignore_eos",
         "--progress=false", "--json=" + json, slo});
    EXPECT_EQ(code, 0);
    auto report = ParseJsonObject(testing::ReadFileOrEmpty(json), json);
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? *report : google::protobuf::Struct();
  };
  // An hour for the first token: every request meets it.
  auto loose = run("--slo_ttft_ms=3600000");
  EXPECT_EQ(loose.fields().at("completed").number_value(), 12);
  EXPECT_EQ(loose.fields().at("slo_met").number_value(), 12);
  EXPECT_EQ(loose.fields().at("burstiness").number_value(), 0.5);
  EXPECT_NEAR(loose.fields().at("goodput").number_value(),
              loose.fields().at("request_throughput").number_value(), 1e-9);
  // A microsecond end to end: none can.
  auto tight = run("--slo_e2e_ms=0.001");
  EXPECT_EQ(tight.fields().at("completed").number_value(), 12);
  EXPECT_EQ(tight.fields().at("slo_met").number_value(), 0);
  EXPECT_EQ(tight.fields().at("goodput").number_value(), 0);
  // A burstiness that is no gamma shape is refused before anything is sent.
  EXPECT_EQ(testing::RunCommand({g_loadgen, "--target=" + server_->address(), "--burstiness=0",
                                 "--progress=false"}),
            2);
  EXPECT_EQ(Stats().requests_submitted(), 24u);
}

TEST_F(ServerTest, ThousandConcurrentStreams) {
  Start({"--max_seq_len=64", "--max_batch=64", "--max_queue=2000", "--threads=2"});
  const int code = testing::RunCommand(
      {g_loadgen, "--target=" + server_->address(), "--rate=inf", "--num_requests=1000",
       "--prompt_len=uniform:1:8", "--output_len=uniform:1:8", "--progress=false"});
  EXPECT_EQ(code, 0) << "some of the 1000 streams failed";
  const v1::Stats s = Stats();
  EXPECT_EQ(s.requests_submitted(), 1000u);
  EXPECT_EQ(s.requests_finished().at("length") + s.requests_finished().at("eos"), 1000u);
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: server_test SERVER CLIENT LOADGEN\n");
    return 2;
  }
  flover::g_server = argv[1];
  flover::g_client = argv[2];
  flover::g_loadgen = argv[3];
  signal(SIGPIPE, SIG_IGN);
  return RUN_ALL_TESTS();
}
