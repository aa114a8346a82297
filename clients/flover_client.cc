// flover_client: sends one Generate request and prints the text (or token
// ids) as it streams; --json prints one object at the end:
// {"token_ids": [...], "text": "...", "finish_reason": "..."}. The prompt is
// --prompt text, --prompt_ids, or a conversation: --chat (a user message,
// with an optional --system message), rendered by the model's chat template.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "util/file_util.h"
#include "util/json.h"
#include "clients/client_tls.h"
#include "clients/status_names.h"
#include "proto/flover.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address");
ABSL_FLAG(std::string, prompt, "", "Prompt text (the model needs a tokenizer)");
ABSL_FLAG(std::string, prompt_ids, "", "Prompt as comma-separated token ids");
ABSL_FLAG(std::string, chat, "",
          "A user message, sent as a conversation through the model's chat template");
ABSL_FLAG(std::string, system, "", "With --chat: a system message before it");
ABSL_FLAG(std::vector<std::string>, image, {},
          "With --chat: image files (PNG or JPEG, comma-separated) the user message shows before its text, for a "
          "vision model");
ABSL_FLAG(int, max_new_tokens, 16, "Tokens to generate");
ABSL_FLAG(double, temperature, 1.0, "0 = greedy");
ABSL_FLAG(int, top_k, 0, "0 = no limit");
ABSL_FLAG(double, top_p, 1.0, "Nucleus mass");
ABSL_FLAG(int64_t, seed, -1, "Sampling seed (-1 = server picks)");
ABSL_FLAG(bool, ignore_eos, false, "Do not stop at end-of-text");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop strings (comma-separated)");
ABSL_FLAG(double, presence_penalty, 0, "OpenAI's presence penalty, in [-2, 2]");
ABSL_FLAG(double, frequency_penalty, 0, "OpenAI's frequency penalty, in [-2, 2]");
ABSL_FLAG(double, min_p, 0, "Min-p, in [0, 1] (0 = off)");
ABSL_FLAG(std::vector<std::string>, logit_bias, {}, "ID:BIAS pairs (comma-separated)");
ABSL_FLAG(std::vector<std::string>, choice, {},
          "The output must be exactly one of these strings (comma-separated)");
ABSL_FLAG(std::string, json_schema, "", "A file holding a JSON Schema the output must match");
ABSL_FLAG(std::string, tools, "",
          "A file holding the tools the model may call (with --chat), as OpenAI's request lists them: "
          "[{\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}]");
ABSL_FLAG(std::string, tool_choice, "", "none, auto, required, or a function's name (empty: auto with --tools)");
ABSL_FLAG(bool, parallel_tool_calls, true, "With --tools: several calls in one reply");
ABSL_FLAG(bool, speculative, true,
          "false: this request drafts nothing on a server started with --speculative (its output is the same)");
ABSL_FLAG(double, timeout_s, 0, "Deadline in seconds (0 = none)");
ABSL_FLAG(std::string, api_key, "", "Sent as 'authorization: Bearer KEY'");
ABSL_FLAG(bool, json, false, "Print one JSON object at the end instead of streaming");

namespace {

// OpenAI's tools list (or bare {"name", ...} functions) into the request.
absl::Status AddTools(const std::string& path, flover::v1::GenerateRequest* req) {
  auto text = flover::ReadFlagFile("--tools", path);
  if (!text.ok()) return text.status();
  const nlohmann::json tools = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!tools.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("--tools: ", path, ": not a JSON list of tools"));
  }
  for (const nlohmann::json& t : tools) {
    const nlohmann::json& f = t.is_object() && t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("--tools: ", path, ": a tool without a name"));
    }
    flover::v1::Tool* out = req->add_tools();
    out->set_name(f["name"].get<std::string>());
    if (f.contains("description") && f["description"].is_string()) {
      out->set_description(f["description"].get<std::string>());
    }
    if (f.contains("parameters")) out->set_parameters(f["parameters"].dump());
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  flover::v1::GenerateRequest req;
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_prompt_ids), ',')) {
      uint32_t id;
      if (!absl::SimpleAtoi(p, &id)) {
        std::fprintf(stderr, "flover_client: --prompt_ids: '%s' is not a token id\n", std::string(p).c_str());
        return 2;
      }
      req.mutable_token_ids()->add_ids(id);
    }
  } else if (!absl::GetFlag(FLAGS_chat).empty()) {
    flover::v1::Messages* messages = req.mutable_messages();
    if (!absl::GetFlag(FLAGS_system).empty()) {
      flover::v1::ChatMessage* m = messages->add_messages();
      m->set_role("system");
      m->set_content(absl::GetFlag(FLAGS_system));
    }
    flover::v1::ChatMessage* m = messages->add_messages();
    m->set_role("user");
    if (absl::GetFlag(FLAGS_image).empty()) {
      m->set_content(absl::GetFlag(FLAGS_chat));
    } else {
      for (const std::string& path : absl::GetFlag(FLAGS_image)) {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
          std::fprintf(stderr, "flover_client: --image: cannot open %s\n", path.c_str());
          return 2;
        }
        std::ostringstream bytes;
        bytes << in.rdbuf();
        m->add_parts()->set_image(bytes.str());
      }
      m->add_parts()->set_text(absl::GetFlag(FLAGS_chat));
    }
  } else {
    req.set_text(absl::GetFlag(FLAGS_prompt));
  }
  req.mutable_sampling()->set_temperature(absl::GetFlag(FLAGS_temperature));
  req.mutable_sampling()->set_top_k(absl::GetFlag(FLAGS_top_k));
  req.mutable_sampling()->set_top_p(absl::GetFlag(FLAGS_top_p));
  if (absl::GetFlag(FLAGS_seed) >= 0) req.mutable_sampling()->set_seed(absl::GetFlag(FLAGS_seed));
  req.mutable_stopping()->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  req.mutable_stopping()->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  for (const std::string& s : absl::GetFlag(FLAGS_stop)) req.mutable_stopping()->add_stop_strings(s);
  req.mutable_sampling()->set_presence_penalty(static_cast<float>(absl::GetFlag(FLAGS_presence_penalty)));
  req.mutable_sampling()->set_frequency_penalty(static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty)));
  req.mutable_sampling()->set_min_p(static_cast<float>(absl::GetFlag(FLAGS_min_p)));
  for (const std::string& pair : absl::GetFlag(FLAGS_logit_bias)) {
    const std::vector<std::string> parts = absl::StrSplit(pair, ':');
    uint32_t id = 0;
    float bias = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &id) || !absl::SimpleAtof(parts[1], &bias)) {
      std::fprintf(stderr, "--logit_bias: expected ID:BIAS, got \"%s\"\n", pair.c_str());
      return 2;
    }
    (*req.mutable_sampling()->mutable_logit_bias())[id] = bias;
  }
  if (!absl::GetFlag(FLAGS_choice).empty()) {
    for (const std::string& c : absl::GetFlag(FLAGS_choice)) {
      req.mutable_constraint()->mutable_choice()->add_choices(c);
    }
  }
  if (!absl::GetFlag(FLAGS_json_schema).empty()) {
    auto schema = flover::ReadFlagFile("--json_schema", absl::GetFlag(FLAGS_json_schema));
    if (!schema.ok()) {
      std::fprintf(stderr, "flover_client: %s\n", std::string(schema.status().message()).c_str());
      return 2;
    }
    req.mutable_constraint()->set_json_schema(*schema);
  }
  if (!absl::GetFlag(FLAGS_tools).empty()) {
    if (absl::Status st = AddTools(absl::GetFlag(FLAGS_tools), &req); !st.ok()) {
      std::fprintf(stderr, "flover_client: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  if (const std::string choice = absl::GetFlag(FLAGS_tool_choice); !choice.empty()) {
    using Mode = flover::v1::ToolChoice;
    Mode* c = req.mutable_tool_choice();
    if (choice == "none") {
      c->set_mode(Mode::NONE);
    } else if (choice == "auto") {
      c->set_mode(Mode::AUTO);
    } else if (choice == "required") {
      c->set_mode(Mode::REQUIRED);
    } else {
      c->set_mode(Mode::FUNCTION);
      c->set_function(choice);
    }
  }
  req.set_parallel_tool_calls(absl::GetFlag(FLAGS_parallel_tool_calls));
  if (!absl::GetFlag(FLAGS_speculative)) req.set_speculative(false);

  auto creds = flover::clients::ChannelCredentialsFromFlags();
  if (!creds.ok()) {
    std::fprintf(stderr, "flover_client: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  auto stub = flover::v1::Flover::NewStub(grpc::CreateChannel(absl::GetFlag(FLAGS_target), *creds));
  grpc::ClientContext ctx;
  if (!absl::GetFlag(FLAGS_api_key).empty()) {
    ctx.AddMetadata("authorization", "Bearer " + absl::GetFlag(FLAGS_api_key));
  }
  if (absl::GetFlag(FLAGS_timeout_s) > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(int64_t(absl::GetFlag(FLAGS_timeout_s) * 1000)));
  }
  const bool json = absl::GetFlag(FLAGS_json);
  // A text or chat prompt means the model has a tokenizer: print text only
  // (an end-of-turn token or a character still incomplete has none). Token
  // ids are printed for an id prompt's tokens that have no text.
  const bool text_only = !req.has_token_ids();
  auto reader = stub->Generate(&ctx, req);
  flover::v1::GenerateResponse resp;
  std::vector<uint32_t> ids;
  std::string text;
  std::string finish = "none";
  std::vector<flover::v1::ToolCall> calls;
  while (reader->Read(&resp)) {
    calls.insert(calls.end(), resp.tool_calls().begin(), resp.tool_calls().end());
    ids.insert(ids.end(), resp.token_ids().begin(), resp.token_ids().end());
    text += resp.text();
    if (!json) {
      if (!resp.text().empty()) {
        std::fputs(resp.text().c_str(), stdout);
      } else if (resp.token_ids_size() > 0 && !text_only) {
        std::printf("%s ", absl::StrJoin(resp.token_ids(), " ").c_str());
      }
      std::fflush(stdout);
    }
    if (resp.finish_reason() != flover::v1::FINISH_REASON_UNSPECIFIED) {
      finish = absl::AsciiStrToLower(flover::v1::FinishReason_Name(resp.finish_reason()));
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    std::fprintf(stderr, "%sflover_client: %s: %s\n", json ? "" : "\n",
                 flover::clients::StatusCodeName(status.error_code()),
                 status.error_message().c_str());
    return 1;
  }
  if (json) {
    std::vector<std::string> call_texts;
    for (const auto& c : calls) {
      call_texts.push_back(absl::StrCat("{\"id\": ", flover::JsonQuote(c.id()), ", \"name\": ",
                                        flover::JsonQuote(c.name()), ", \"arguments\": ",
                                        flover::JsonQuote(c.arguments()), "}"));
    }
    std::printf("{\"token_ids\": [%s], \"text\": %s, \"finish_reason\": \"%s\", \"tool_calls\": [%s]}\n",
                absl::StrJoin(ids, ", ").c_str(), flover::JsonQuote(text).c_str(), finish.c_str(),
                absl::StrJoin(call_texts, ", ").c_str());
  } else {
    for (const auto& c : calls) std::printf("\n[call %s: %s(%s)]", c.id().c_str(), c.name().c_str(), c.arguments().c_str());
    std::printf("\n[%s]\n", finish.c_str());
  }
  return 0;
}
