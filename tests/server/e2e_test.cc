// End to end: the real server on an ephemeral loopback port (alone, or as
// rank 0 of an mpirun job with --tp=2); the bundled load client sends 100
// Poisson requests with mixed prompt and output lengths; all succeed, and
// each output (from --dump_outputs) equals the same request run alone
// through the same server afterwards (with speculation opted out, when the
// server speculates), and, with one rank, the engine's output for it run
// alone in-process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <grpcpp/grpcpp.h>

#include "engine/generate.h"
#include "util/json.h"
#include "model/model_loader.h"
#include "testing/golden.h"
#include "testing/backends.h"
#include "proto/flover.grpc.pb.h"
#include "tests/server/server_process.h"

namespace flover {
namespace {

using testing::JsonIds;

std::string g_loadgen;
std::vector<std::string> g_server_command;  // binary, or launcher + binary + flags
bool g_speculative = false;                 // the server runs --speculative=ngram, draft or mtp
bool g_mtp = false;                         // ... mtp: a random fixture's layer, whose drafts are rarely taken
std::string g_model = "builtin:tiny";        // --model= among the flags, else builtin:tiny

// Sends one dumped request on its own and returns the tokens.
std::vector<int32_t> RunAloneThroughServer(v1::Flover::Stub& stub,
                                           const google::protobuf::Struct& dumped) {
  const auto& f = dumped.fields();
  v1::GenerateRequest r;
  for (int32_t id : JsonIds(f.at("prompt_ids"))) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_temperature(static_cast<float>(f.at("temperature").number_value()));
  r.mutable_sampling()->set_top_k(static_cast<int>(f.at("top_k").number_value()));
  r.mutable_sampling()->set_seed(static_cast<uint64_t>(f.at("seed").number_value()));
  r.mutable_stopping()->set_max_new_tokens(static_cast<int>(f.at("max_new_tokens").number_value()));
  r.mutable_stopping()->set_ignore_eos(f.at("ignore_eos").bool_value());
  r.set_speculative(false);
  grpc::ClientContext ctx;
  auto reader = stub.Generate(&ctx, r);
  v1::GenerateResponse resp;
  std::vector<int32_t> ids;
  while (reader->Read(&resp)) ids.insert(ids.end(), resp.token_ids().begin(), resp.token_ids().end());
  EXPECT_TRUE(reader->Finish().ok());
  return ids;
}

TEST(EndToEndTest, PoissonLoadOutputsEqualRunsAlone) {
  testing::ServerProcess server(g_server_command,
                                {"--model=" + g_model, "--max_seq_len=128", "--max_batch=16",
                                 "--max_tokens_per_step=64"});
  ASSERT_TRUE(server.ok()) << "server did not start";
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string dump = dir + "/outputs.jsonl", report = dir + "/report.json";
  // With speculation, greedy: a random model's greedy answers repeat
  // themselves, which is where n-gram drafts are taken.
  const int code = testing::RunCommand(
      {g_loadgen, "--target=" + server.address(), "--rate=200", "--num_requests=100",
       "--prompt_len=uniform:1:64", "--output_len=uniform:1:48",
       g_speculative ? "--temperature=0" : "--temperature=0.8",
       "--top_k=40", "--seed=7", "--dump_outputs=" + dump, "--json=" + report,
       "--progress=false"});
  EXPECT_EQ(code, 0);

  // The one-rank engine in this process, for the in-process reference.
  auto loaded = LoadModel(g_model);
  ASSERT_TRUE(loaded.ok());
  auto backend = testing::CpuBackend();
  auto model = testing::ModelOn(*backend, **loaded);
  const bool one_rank = g_server_command.size() == 1;
  auto stub = v1::Flover::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));

  std::ifstream in(dump);
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    auto obj = ParseJsonObject(line, "dump");
    ASSERT_TRUE(obj.ok()) << obj.status();
    const auto& f = obj->fields();
    const int index = static_cast<int>(f.at("index").number_value());
    EXPECT_EQ(f.at("status").string_value(), "OK") << line;
    const std::vector<int32_t> under_load = JsonIds(f.at("output_ids"));
    // Alone through the same deployment (one rank or several): bitwise equal.
    EXPECT_EQ(under_load, RunAloneThroughServer(*stub, *obj)) << "request " << index;
    if (one_rank) {
      // And equal to the engine run alone in-process. (With tp > 1 the
      // all-reduce sums partial products in another order than one rank
      // does, so logits agree to ~1e-6, not bitwise; tests/tp checks that.)
      GenerateOptions g;
      g.max_new_tokens = static_cast<int>(f.at("max_new_tokens").number_value());
      g.ignore_eos = f.at("ignore_eos").bool_value();
      g.sampling.temperature = static_cast<float>(f.at("temperature").number_value());
      g.sampling.top_k = static_cast<int>(f.at("top_k").number_value());
      g.sampling.seed = static_cast<uint64_t>(f.at("seed").number_value());
      auto alone = GenerateAlone(*model, JsonIds(f.at("prompt_ids")), g);
      ASSERT_TRUE(alone.ok()) << alone.status();
      EXPECT_EQ(under_load, *alone) << "request " << index;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 100);
  if (g_speculative) {
    // Drafts were verified under the load, and some taken.
    grpc::ClientContext ctx;
    v1::Stats stats;
    ASSERT_TRUE(stub->GetStats(&ctx, v1::GetStatsRequest(), &stats).ok());
    std::printf("speculative: %llu draft tokens verified, %llu taken\n",
                static_cast<unsigned long long>(stats.speculative_draft_tokens()),
                static_cast<unsigned long long>(stats.speculative_accepted_tokens()));
    if (g_mtp) {
      EXPECT_GT(stats.speculative_draft_tokens(), 0u);
    } else {
      EXPECT_GT(stats.speculative_accepted_tokens(), 0u);
    }
  }
  // Drain: SIGTERM to the server (rank 0 under mpirun); everything exits 0.
  kill(server.Rank0(), SIGTERM);
  EXPECT_EQ(server.Wait(std::chrono::seconds(30)), 0);
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: e2e_test LOADGEN SERVER_COMMAND...\n");
    return 2;
  }
  flover::g_loadgen = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--model=", 0) == 0) {
      flover::g_model = arg.substr(8);
      continue;
    }
    flover::g_server_command.push_back(argv[i]);
    if (arg == "--speculative=ngram" || arg == "--speculative=draft" || arg == "--speculative=mtp") {
      flover::g_speculative = true;
    }
    if (arg == "--speculative=mtp") flover::g_mtp = true;
  }
  return RUN_ALL_TESTS();
}
