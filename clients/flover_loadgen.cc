// flover_loadgen: the bundled Poisson load client. Requests are sent
// open-loop (exponential gaps at --rate, or gamma gaps with --burstiness; a
// slow server never slows the arrival clock, only --max_concurrency can hold
// a request back) over gRPC's callback API, and the report gives, like
// vLLM's benchmark_serving and genai-perf: completed/failed by status,
// duration, request throughput, output tokens/s, TTFT, TPOT, inter-token
// latency and end-to-end latency (mean, p50, p90, p99), and with --slo_*
// the goodput: completed requests per second that met every objective.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "clients/client_tls.h"
#include "clients/load_plan.h"
#include "clients/status_names.h"
#include "util/runfiles.h"
#include "util/file_util.h"
#include "util/json.h"
#include "proto/flover.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address, or several (HOST:PORT,HOST:PORT) to spread requests over them with "
          "gRPC's round_robin balancing");
ABSL_FLAG(std::string, api_key, "", "Sent as 'authorization: Bearer KEY' (gRPC and HTTP)");
ABSL_FLAG(int, retries, 0,
          "gRPC: retry a request refused with UNAVAILABLE before any token (a draining or "
          "restarting replica) up to this many times");
ABSL_FLAG(std::string, rate, "4", "Requests per second (Poisson), or inf for all at once");
ABSL_FLAG(double, burstiness, 1.0,
          "Shape of the gamma-distributed gaps (mean 1/rate): 1 = Poisson, < 1 burstier, > 1 "
          "more even");
ABSL_FLAG(double, slo_ttft_ms, 0, "Goodput: time to first token objective (0 = none)");
ABSL_FLAG(double, slo_tpot_ms, 0, "Goodput: time per output token objective (0 = none)");
ABSL_FLAG(double, slo_e2e_ms, 0, "Goodput: end-to-end latency objective (0 = none)");
ABSL_FLAG(int, num_requests, 32, "Requests to send");
ABSL_FLAG(double, duration, 0, "If > 0: send for this many seconds instead (at most 100000 requests)");
ABSL_FLAG(std::string, prompt_len, "8", "Prompt tokens: N or uniform:A:B");
ABSL_FLAG(std::string, output_len, "64", "max_new_tokens: N or uniform:A:B");
ABSL_FLAG(int, seed, 0, "Seed of arrivals, lengths, prompts and sampling");
ABSL_FLAG(double, temperature, 1.0, "Sampling temperature (each request gets seed + index)");
ABSL_FLAG(int, top_k, 0, "top_k");
ABSL_FLAG(int, max_concurrency, 0, "At most this many requests in flight (0 = no limit)");
ABSL_FLAG(bool, ignore_eos, false, "Ask for exactly max_new_tokens");
ABSL_FLAG(std::string, dataset, "",
          "JSONL prompts: {\"prompt\": TEXT}, {\"prompt_ids\": [...]} or {\"messages\": [{\"role\", "
          "\"content\"}, ...]} (through the model's chat template), optional \"max_new_tokens\"");
ABSL_FLAG(bool, chat, false,
          "Send each request as a conversation to the OpenAI API's /v1/chat/completions (HTTP, "
          "streamed) at --target: a --dataset line's prompt becomes the user's message, its "
          "messages are sent as they are");
ABSL_FLAG(double, timeout_s, 0, "Per-request deadline (0 = none)");
ABSL_FLAG(std::string, json_schema, "",
          "A file holding a JSON Schema every request's output must match (constrained load: gRPC's "
          "constraint.json_schema, HTTP's response_format json_schema)");
ABSL_FLAG(std::string, json, "", "Write the report as JSON here");
ABSL_FLAG(std::string, dump_outputs, "", "Write one JSON line per request here");
ABSL_FLAG(bool, progress, true, "Print a progress line on stderr");
ABSL_FLAG(std::string, plot, "",
          "Draw per-request latency over the run and the latency CDFs into this PNG (with "
          "clients/plot_loadgen.py and matplotlib; the timings go to FILE.json beside it)");
ABSL_FLAG(bool, http, false,
          "Drive the OpenAI-compatible HTTP API at --target (flover_server --http_listen) with "
          "streamed /v1/completions instead of gRPC: the same workload, one thread per request");

namespace flover::clients {
namespace {

using Clock = std::chrono::steady_clock;

ClientTls g_tls;  // from the flags, for HTTPS clients too

// An HTTP(S) client for the target: HTTPS with --tls_ca (and the client
// certificate when given).
std::unique_ptr<httplib::Client> HttpClient(const std::string& target) {
  std::unique_ptr<httplib::Client> client;
  if (!g_tls.enabled()) {
    client = std::make_unique<httplib::Client>("http://" + target);
  } else {
    client = std::make_unique<httplib::Client>("https://" + target, g_tls.cert, g_tls.key);
    client->set_ca_cert_path(g_tls.ca);
    client->enable_server_certificate_verification(true);
  }
  return client;
}

struct Lengths {
  int lo = 0, hi = 0;
};

absl::StatusOr<Lengths> ParseLengths(const std::string& flag, const std::string& spec) {
  std::vector<std::string> p = absl::StrSplit(spec, ':');
  Lengths l;
  if (p.size() == 1 && absl::SimpleAtoi(p[0], &l.lo) && l.lo > 0) {
    l.hi = l.lo;
    return l;
  }
  if (p.size() == 3 && p[0] == "uniform" && absl::SimpleAtoi(p[1], &l.lo) &&
      absl::SimpleAtoi(p[2], &l.hi) && 0 < l.lo && l.lo <= l.hi) {
    return l;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": '", spec, "' is not N or uniform:A:B with 0 < A <= B"));
}

struct Planned {
  v1::GenerateRequest request;
  std::vector<uint32_t> prompt_ids;  // empty for text prompts
  std::string prompt_text;
  double offset_s = 0;  // scheduled send time from the start
};

struct Outcome {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;
  std::string finish_reason;
  std::vector<uint32_t> output_ids;
  double sent_s = 0, first_s = -1, end_s = 0;
  std::vector<double> token_times;  // arrival time of each token's message
};

class Stats {
 public:
  void Add(double v) { v_.push_back(v); }
  bool empty() const { return v_.empty(); }
  double Mean() const {
    double s = 0;
    for (double x : v_) s += x;
    return v_.empty() ? 0 : s / v_.size();
  }
  double Pct(double p) const {
    if (v_.empty()) return 0;
    std::vector<double> s = v_;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1, static_cast<size_t>(p / 100 * (s.size() - 1) + 0.5))];
  }

 private:
  std::vector<double> v_;
};

class Call;

// Counts calls in flight; the arrival loop waits on it only for --max_concurrency.
class InFlight {
 public:
  void Begin() {
    std::lock_guard<std::mutex> l(mu_);
    ++n_;
  }
  void End() {
    std::lock_guard<std::mutex> l(mu_);
    --n_;
    ++done_;
    cv_.notify_all();
  }
  void WaitBelow(int limit) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return n_ < limit; });
  }
  void WaitAll(int total) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_ >= total; });
  }
  int done() {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }
  int in_flight() {
    std::lock_guard<std::mutex> l(mu_);
    return n_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0, done_ = 0;
};

class Call : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Call(v1::Flover::Stub* stub, const v1::GenerateRequest& request, Outcome* out,
       Clock::time_point t0, InFlight* in_flight, double timeout_s)
      : out_(out), t0_(t0), in_flight_(in_flight) {
    if (timeout_s > 0) {
      ctx_.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(int64_t(timeout_s * 1e6)));
    }
    if (!absl::GetFlag(FLAGS_api_key).empty()) {
      ctx_.AddMetadata("authorization", "Bearer " + absl::GetFlag(FLAGS_api_key));
    }
    out_->sent_s = Now();
    stub->async()->Generate(&ctx_, &request, this);
    StartRead(&resp_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    const double t = Now();
    if (resp_.token_ids_size() > 0 && out_->first_s < 0) out_->first_s = t;
    for (int i = 0; i < resp_.token_ids_size(); ++i) {
      out_->output_ids.push_back(resp_.token_ids(i));
      out_->token_times.push_back(t);
    }
    if (resp_.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      out_->finish_reason = absl::AsciiStrToLower(v1::FinishReason_Name(resp_.finish_reason()));
    }
    StartRead(&resp_);
  }

  void OnDone(const grpc::Status& s) override {
    out_->end_s = Now();
    out_->code = s.error_code();
    out_->message = s.error_message();
    InFlight* f = in_flight_;
    delete this;
    f->End();
  }

 private:
  double Now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  grpc::ClientContext ctx_;
  v1::GenerateResponse resp_;
  Outcome* out_;
  Clock::time_point t0_;
  InFlight* in_flight_;
};

// The report's status for an HTTP status (as the server maps them).
grpc::StatusCode CodeOfHttp(int status) {
  switch (status) {
    case 200: return grpc::StatusCode::OK;
    case 400: return grpc::StatusCode::INVALID_ARGUMENT;
    case 404: return grpc::StatusCode::NOT_FOUND;
    case 429: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 499: return grpc::StatusCode::CANCELLED;
    case 503: return grpc::StatusCode::UNAVAILABLE;
    case 504: return grpc::StatusCode::DEADLINE_EXCEEDED;
    default: return grpc::StatusCode::INTERNAL;
  }
}

// Whether requests go over the OpenAI HTTP API (--http, or --chat).
bool OverHttp() { return absl::GetFlag(FLAGS_http) || absl::GetFlag(FLAGS_chat); }

// The streamed body for a planned request: /v1/chat/completions' for a
// conversation, /v1/completions' otherwise.
std::string HttpBody(const v1::GenerateRequest& r) {
  std::string prompt;
  if (r.has_messages()) {
    std::vector<std::string> messages;
    for (const v1::ChatMessage& m : r.messages().messages()) {
      messages.push_back(absl::StrCat("{\"role\": ", JsonQuote(m.role()), ", \"content\": ",
                                      JsonQuote(m.content()), "}"));
    }
    prompt = absl::StrCat("\"messages\": [", absl::StrJoin(messages, ", "), "]");
  } else {
    prompt = absl::StrCat("\"prompt\": ",
                          r.has_token_ids() ? absl::StrCat("[", absl::StrJoin(r.token_ids().ids(), ", "), "]")
                                            : JsonQuote(r.text()));
  }
  // A schema (checked to be a JSON object when read) goes in as it is.
  const std::string format =
      r.constraint().json_schema().empty()
          ? ""
          : absl::StrCat(", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": "
                         "\"loadgen\", \"schema\": ", r.constraint().json_schema(), "}}");
  return absl::StrFormat(
      "{%s, \"max_tokens\": %d, \"temperature\": %.9g, \"top_k\": %d, \"seed\": %d, "
      "\"ignore_eos\": %s, \"stream\": true%s}",
      prompt, r.stopping().max_new_tokens(), r.sampling().temperature(), r.sampling().top_k(),
      static_cast<int64_t>(r.sampling().seed()), r.stopping().ignore_eos() ? "true" : "false", format);
}

// One streamed completion (or chat completion) over HTTP, on its own
// thread: each server-sent event's token_ids are recorded as a gRPC
// message's would be.
void HttpCall(const std::string& target, const v1::GenerateRequest& request, Outcome* out,
              Clock::time_point t0, InFlight* in_flight, double timeout_s) {
  auto now = [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::unique_ptr<httplib::Client> http = HttpClient(target);
  httplib::Client& client = *http;
  client.set_read_timeout(timeout_s > 0 ? static_cast<time_t>(std::ceil(timeout_s)) : 3600, 0);
  client.set_connection_timeout(10, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = request.has_messages() ? "/v1/chat/completions" : "/v1/completions";
  req.body = HttpBody(request);
  req.set_header("Content-Type", "application/json");
  if (!absl::GetFlag(FLAGS_api_key).empty()) {
    req.set_header("Authorization", "Bearer " + absl::GetFlag(FLAGS_api_key));
  }
  int status = 0;
  std::string buffer, error_body;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      auto json = ParseJsonObject(event.substr(6), "event");
      if (!json.ok()) continue;
      const auto& f = json->fields();
      if (auto e = f.find("error"); e != f.end()) {  // the request failed mid-stream
        const auto& ef = e->second.struct_value().fields();
        out->code = grpc::StatusCode::INTERNAL;
        if (auto m = ef.find("message"); m != ef.end()) out->message = m->second.string_value();
        continue;
      }
      auto choices = f.find("choices");
      if (choices == f.end() || choices->second.list_value().values_size() == 0) continue;
      const auto& c = choices->second.list_value().values(0).struct_value().fields();
      const double t = now();
      if (auto ids = c.find("token_ids"); ids != c.end()) {
        for (const auto& v : ids->second.list_value().values()) {
          if (out->first_s < 0) out->first_s = t;
          out->output_ids.push_back(static_cast<uint32_t>(v.number_value()));
          out->token_times.push_back(t);
        }
      }
      if (auto r = c.find("finish_reason"); r != c.end() && r->second.has_string_value()) {
        out->finish_reason = r->second.string_value();
      }
    }
    return true;
  };
  out->sent_s = now();
  const httplib::Result res = client.send(req);
  out->end_s = now();
  if (!res) {
    out->code = grpc::StatusCode::UNAVAILABLE;
    out->message = httplib::to_string(res.error());
  } else if (status != 200) {
    out->code = CodeOfHttp(status);
    out->message = error_body;
  }
  in_flight->End();
}

// A channel to one target, or round_robin over several ("A,B,...": IPv4
// HOST:PORT each, resolved once); with retries > 0, gRPC retries a call that
// failed with UNAVAILABLE before it committed (no message received).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int retries,
                                          std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  std::string uri = target;
  if (target.find(',') != std::string::npos) {
    uri = "ipv4:" + target;
    args.SetLoadBalancingPolicyName("round_robin");
  }
  if (retries > 0) {
    args.SetServiceConfigJSON(absl::StrFormat(
        R"({"methodConfig": [{"name": [{"service": "flover.v1.Flover"}], "retryPolicy": {)"
        R"("maxAttempts": %d, "initialBackoff": "0.05s", "maxBackoff": "1s", )"
        R"("backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})",
        std::min(retries + 1, 5)));
  }
  return grpc::CreateCustomChannel(uri, creds, args);
}

// The vocabulary random prompts are drawn from: GetModelInfo over gRPC,
// /v1/models' vocab_size over HTTP.
absl::StatusOr<int> VocabSize(v1::Flover::Stub* stub) {
  if (OverHttp()) {
    std::unique_ptr<httplib::Client> http = HttpClient(absl::GetFlag(FLAGS_target));
    httplib::Client& client = *http;
    client.set_connection_timeout(10, 0);
    httplib::Headers headers;
    if (!absl::GetFlag(FLAGS_api_key).empty()) {
      headers.emplace("Authorization", "Bearer " + absl::GetFlag(FLAGS_api_key));
    }
    auto res = client.Get("/v1/models", headers);
    if (!res || res->status != 200) {
      return absl::UnavailableError(
          absl::StrCat("GET /v1/models on ", absl::GetFlag(FLAGS_target), " failed"));
    }
    auto json = ParseJsonObject(res->body, "/v1/models");
    if (!json.ok()) return json.status();
    auto data = json->fields().find("data");
    if (data == json->fields().end() || data->second.list_value().values_size() == 0) {
      return absl::UnavailableError("/v1/models lists no model");
    }
    return JsonIntField(data->second.list_value().values(0).struct_value(), "vocab_size", 1,
                        1 << 30, "/v1/models");
  }
  grpc::ClientContext ctx;
  if (!absl::GetFlag(FLAGS_api_key).empty()) {
    ctx.AddMetadata("authorization", "Bearer " + absl::GetFlag(FLAGS_api_key));
  }
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ModelInfo info;
  grpc::Status st = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("GetModelInfo: ", StatusCodeName(st.error_code()),
                                               ": ", st.error_message()));
  }
  return static_cast<int>(info.vocab_size());
}

absl::StatusOr<std::vector<Planned>> Plan(v1::Flover::Stub* stub) {
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  auto prompt_len = ParseLengths("prompt_len", absl::GetFlag(FLAGS_prompt_len));
  if (!prompt_len.ok()) return prompt_len.status();
  auto output_len = ParseLengths("output_len", absl::GetFlag(FLAGS_output_len));
  if (!output_len.ok()) return output_len.status();
  double rate = 0;
  const std::string rate_flag = absl::GetFlag(FLAGS_rate);
  const bool burst = rate_flag == "inf";
  if (!burst && (!absl::SimpleAtod(rate_flag, &rate) || !(rate > 0))) {
    return absl::InvalidArgumentError("--rate must be a positive number or inf");
  }
  const double burstiness = absl::GetFlag(FLAGS_burstiness);
  if (!(burstiness > 0) || std::isinf(burstiness)) {
    return absl::InvalidArgumentError("--burstiness must be a positive number (1 = Poisson)");
  }
  int n = absl::GetFlag(FLAGS_num_requests);
  const double duration = absl::GetFlag(FLAGS_duration);
  if (duration > 0) n = burst ? absl::GetFlag(FLAGS_num_requests) : std::min(100000, int(duration * rate * 2) + 16);

  auto vocab = VocabSize(stub);
  if (!vocab.ok()) return vocab.status();
  const int vocab_size = *vocab;

  const bool chat = absl::GetFlag(FLAGS_chat);
  if (chat && absl::GetFlag(FLAGS_dataset).empty()) {
    return absl::InvalidArgumentError("--chat needs --dataset (text prompts or messages)");
  }
  std::vector<std::pair<std::string, google::protobuf::Struct>> dataset;
  if (!absl::GetFlag(FLAGS_dataset).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_dataset));
    if (!in) return absl::NotFoundError(absl::StrCat(absl::GetFlag(FLAGS_dataset), ": cannot open"));
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      auto obj = ParseJsonObject(line, absl::StrCat(absl::GetFlag(FLAGS_dataset), " line ", line_no));
      if (!obj.ok()) return obj.status();
      dataset.emplace_back(line, *obj);
    }
    if (dataset.empty()) return absl::InvalidArgumentError("--dataset has no prompts");
  }

  std::string schema;
  if (const std::string path = absl::GetFlag(FLAGS_json_schema); !path.empty()) {
    auto text = ReadFlagFile("--json_schema", path);
    if (!text.ok()) return text.status();
    schema = std::move(*text);
    if (auto parsed = ParseJsonObject(schema, "--json_schema"); !parsed.ok()) return parsed.status();
  }

  Arrivals arrivals(burst ? 0 : rate, burstiness);
  std::vector<Planned> plan(n);
  for (int i = 0; i < n; ++i) {
    Planned& p = plan[i];
    p.offset_s = arrivals.Next(rng);
    int max_new = std::uniform_int_distribution<int>(output_len->lo, output_len->hi)(rng);
    if (!dataset.empty()) {
      const auto& fields = dataset[i % dataset.size()].second.fields();
      if (auto m = fields.find("messages"); m != fields.end()) {
        for (const auto& v : m->second.list_value().values()) {
          const auto& f = v.struct_value().fields();
          auto role = f.find("role"), content = f.find("content");
          if (role == f.end() || content == f.end()) {
            return absl::InvalidArgumentError("--dataset: each message needs \"role\" and \"content\"");
          }
          v1::ChatMessage* msg = p.request.mutable_messages()->add_messages();
          msg->set_role(role->second.string_value());
          msg->set_content(content->second.string_value());
          p.prompt_text += content->second.string_value();
        }
      } else if (auto it = fields.find("prompt"); it != fields.end()) {
        p.prompt_text = it->second.string_value();
        if (chat) {
          v1::ChatMessage* msg = p.request.mutable_messages()->add_messages();
          msg->set_role("user");
          msg->set_content(p.prompt_text);
        } else {
          p.request.set_text(p.prompt_text);
        }
      } else if (chat) {
        return absl::InvalidArgumentError("--chat: --dataset lines need \"prompt\" or \"messages\"");
      } else if (auto ids = fields.find("prompt_ids"); ids != fields.end()) {
        for (const auto& v : ids->second.list_value().values()) {
          auto id = JsonToInt(v, "prompt_ids", 0, vocab_size - 1);
          if (!id.ok()) return id.status();
          p.prompt_ids.push_back(static_cast<uint32_t>(*id));
        }
      } else {
        return absl::InvalidArgumentError(
            "--dataset lines need \"prompt\", \"prompt_ids\" or \"messages\"");
      }
      if (auto m = fields.find("max_new_tokens"); m != fields.end()) {
        auto v = JsonToInt(m->second, "max_new_tokens", 1, 1 << 20);
        if (!v.ok()) return v.status();
        max_new = static_cast<int>(*v);
      }
    } else {
      const int len = std::uniform_int_distribution<int>(prompt_len->lo, prompt_len->hi)(rng);
      for (int k = 0; k < len; ++k) {
        p.prompt_ids.push_back(std::uniform_int_distribution<uint32_t>(0, vocab_size - 1)(rng));
      }
    }
    for (uint32_t id : p.prompt_ids) p.request.mutable_token_ids()->add_ids(id);
    p.request.set_request_id(absl::StrCat("loadgen-", i));
    auto* s = p.request.mutable_sampling();
    s->set_temperature(absl::GetFlag(FLAGS_temperature));
    s->set_top_k(absl::GetFlag(FLAGS_top_k));
    s->set_seed(static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)) * 1000003 + i);
    p.request.mutable_stopping()->set_max_new_tokens(max_new);
    p.request.mutable_stopping()->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
    if (!schema.empty()) p.request.mutable_constraint()->set_json_schema(schema);
  }
  return plan;
}

// Writes the run's per-request timings to `png`.json and draws `png` with
// plot_loadgen.py (found beside the binary, in its runfiles, or at
// $FLOVER_PLOT_SCRIPT; run by $FLOVER_PYTHON, default python3).
absl::Status Plot(const std::string& png, const std::vector<Outcome>& outcomes, int sent,
                  const std::string& title) {
  const std::string json = png + ".json";
  {
    std::ofstream out(json);
    if (!out) return absl::NotFoundError(absl::StrCat("--plot: cannot write ", json));
    out << "{\"title\": " << JsonQuote(title) << ", \"requests\": [\n";
    for (int i = 0; i < sent; ++i) {
      const Outcome& o = outcomes[i];
      const bool ok = o.code == grpc::StatusCode::OK;
      std::vector<std::string> gaps;
      for (size_t k = 1; k < o.token_times.size(); ++k) {
        if (o.token_times[k] > o.token_times[k - 1]) {
          gaps.push_back(absl::StrFormat("%.6f", o.token_times[k] - o.token_times[k - 1]));
        }
      }
      const std::string ttft =
          o.first_s >= 0 ? absl::StrFormat("%.6f", o.first_s - o.sent_s) : std::string("null");
      const std::string tpot =
          o.output_ids.size() > 1
              ? absl::StrFormat("%.6f", (o.end_s - o.first_s) / (o.output_ids.size() - 1))
              : std::string("null");
      out << absl::StrFormat(
          "%s{\"sent_s\": %.6f, \"ttft_s\": %s, \"e2e_s\": %.6f, \"tpot_s\": %s, \"ok\": %s, "
          "\"gaps_s\": [%s]}\n",
          i > 0 ? "," : "", o.sent_s, ttft, o.end_s - o.sent_s, tpot, ok ? "true" : "false",
          absl::StrJoin(gaps, ", "));
    }
    out << "]}\n";
  }
  const std::string script =
      FindRunfile("FLOVER_PLOT_SCRIPT", "plot_loadgen.py", "clients/plot_loadgen.py");
  if (script.empty()) return absl::NotFoundError("--plot: plot_loadgen.py was not found");
  const char* env_python = std::getenv("FLOVER_PYTHON");
  const std::string python = env_python != nullptr && *env_python ? env_python : "python3";
  std::vector<std::string> args = {python, script, json, png};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    return absl::NotFoundError(absl::StrCat("--plot: cannot run ", python));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("--plot: ", python, " ", script, " failed"));
  }
  return absl::OkStatus();
}

void PrintStatsLine(const char* name, const char* unit, const Stats& s, double scale) {
  std::printf("%-22s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f  %s\n", name, s.Mean() * scale,
              s.Pct(50) * scale, s.Pct(90) * scale, s.Pct(99) * scale, unit);
}

std::string StatsJson(const Stats& s, double scale) {
  return absl::StrFormat("{\"mean\": %.6f, \"p50\": %.6f, \"p90\": %.6f, \"p99\": %.6f}",
                         s.Mean() * scale, s.Pct(50) * scale, s.Pct(90) * scale, s.Pct(99) * scale);
}

int Run() {
  auto creds = ChannelCredentialsFromFlags(&g_tls);
  if (!creds.ok()) {
    std::fprintf(stderr, "flover_loadgen: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  auto channel = MakeChannel(absl::GetFlag(FLAGS_target), absl::GetFlag(FLAGS_retries), *creds);
  auto stub = v1::Flover::NewStub(channel);
  auto plan = Plan(stub.get());
  if (!plan.ok()) {
    std::fprintf(stderr, "flover_loadgen: %s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  const int n = static_cast<int>(plan->size());
  const double duration = absl::GetFlag(FLAGS_duration);
  const int max_conc = absl::GetFlag(FLAGS_max_concurrency);
  std::vector<Outcome> outcomes(n);
  InFlight in_flight;
  const Clock::time_point t0 = Clock::now();
  std::atomic<bool> sending{true};
  std::thread progress([&] {
    while (sending.load() || in_flight.in_flight() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (absl::GetFlag(FLAGS_progress)) {
        std::fprintf(stderr, "\r[%6.1f s] done %d, in flight %d   ",
                     std::chrono::duration<double>(Clock::now() - t0).count(), in_flight.done(),
                     in_flight.in_flight());
      }
    }
    if (absl::GetFlag(FLAGS_progress)) std::fprintf(stderr, "\n");
  });
  std::vector<std::thread> http_threads;
  int sent = 0;
  for (; sent < n; ++sent) {
    const Planned& p = (*plan)[sent];
    if (duration > 0 && p.offset_s > duration) break;
    std::this_thread::sleep_until(t0 + std::chrono::microseconds(int64_t(p.offset_s * 1e6)));
    if (max_conc > 0) in_flight.WaitBelow(max_conc);
    in_flight.Begin();
    if (OverHttp()) {
      http_threads.emplace_back(HttpCall, absl::GetFlag(FLAGS_target), std::cref(p.request),
                                &outcomes[sent], t0, &in_flight, absl::GetFlag(FLAGS_timeout_s));
    } else {
      new Call(stub.get(), p.request, &outcomes[sent], t0, &in_flight, absl::GetFlag(FLAGS_timeout_s));
    }
  }
  in_flight.WaitAll(sent);
  for (std::thread& t : http_threads) t.join();
  sending = false;
  progress.join();

  // Report.
  std::map<std::string, int> by_status;
  Stats ttft, tpot, itl, e2e;
  const Slo slo{absl::GetFlag(FLAGS_slo_ttft_ms) / 1e3, absl::GetFlag(FLAGS_slo_tpot_ms) / 1e3,
                absl::GetFlag(FLAGS_slo_e2e_ms) / 1e3};
  int met_slo = 0;
  int64_t output_tokens = 0;
  double first_sent = 1e300, last_end = 0;
  for (int i = 0; i < sent; ++i) {
    const Outcome& o = outcomes[i];
    by_status[StatusCodeName(o.code)]++;
    first_sent = std::min(first_sent, o.sent_s);
    last_end = std::max(last_end, o.end_s);
    if (o.code != grpc::StatusCode::OK) continue;
    output_tokens += o.output_ids.size();
    e2e.Add(o.end_s - o.sent_s);
    if (o.first_s >= 0) ttft.Add(o.first_s - o.sent_s);
    if (o.first_s >= 0 && MeetsSlo(slo, o.first_s - o.sent_s, o.end_s - o.sent_s,
                                   static_cast<int>(o.output_ids.size()))) {
      ++met_slo;
    }
    if (o.output_ids.size() > 1) tpot.Add((o.end_s - o.first_s) / (o.output_ids.size() - 1));
    for (size_t k = 1; k < o.token_times.size(); ++k) {
      if (o.token_times[k] > o.token_times[k - 1]) itl.Add(o.token_times[k] - o.token_times[k - 1]);
    }
  }
  const double dur = sent > 0 ? last_end - first_sent : 0;
  const int ok = by_status.count("OK") ? by_status["OK"] : 0;
  std::printf("============ flover_loadgen report ============\n");
  std::printf("target %s, rate %s req/s, %d requests sent\n", absl::GetFlag(FLAGS_target).c_str(),
              absl::GetFlag(FLAGS_rate).c_str(), sent);
  std::printf("completed %d, failed %d", ok, sent - ok);
  for (const auto& [code, count] : by_status) {
    if (code != "OK") std::printf(" (%s: %d)", code.c_str(), count);
  }
  std::printf("\nduration %.2f s, request throughput %.2f req/s, output %.1f tokens/s (%ld tokens)\n", dur,
              dur > 0 ? ok / dur : 0, dur > 0 ? output_tokens / dur : 0, long(output_tokens));
  PrintStatsLine("TTFT", "ms", ttft, 1e3);
  PrintStatsLine("TPOT", "ms", tpot, 1e3);
  PrintStatsLine("inter-token latency", "ms", itl, 1e3);
  PrintStatsLine("end-to-end latency", "s", e2e, 1);
  const double goodput = dur > 0 ? met_slo / dur : 0;
  if (slo.any()) {
    std::vector<std::string> objectives;
    if (slo.ttft_s > 0) objectives.push_back(absl::StrFormat("TTFT <= %g ms", slo.ttft_s * 1e3));
    if (slo.tpot_s > 0) objectives.push_back(absl::StrFormat("TPOT <= %g ms", slo.tpot_s * 1e3));
    if (slo.e2e_s > 0) objectives.push_back(absl::StrFormat("e2e <= %g ms", slo.e2e_s * 1e3));
    std::printf("goodput %.2f req/s: %d of %d requests met %s\n", goodput, met_slo, sent,
                absl::StrJoin(objectives, ", ").c_str());
  }

  if (!absl::GetFlag(FLAGS_json).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_json));
    std::vector<std::string> codes;
    for (const auto& [code, count] : by_status) codes.push_back(absl::StrCat("\"", code, "\": ", count));
    out << absl::StrFormat(
        "{\"target\": %s, \"rate\": %s, \"sent\": %d, \"completed\": %d, \"failed\": %d, "
        "\"by_status\": {%s}, \"duration_s\": %.6f, \"request_throughput\": %.6f, "
        "\"output_tokens\": %ld, \"output_tokens_per_s\": %.6f, \"ttft_ms\": %s, \"tpot_ms\": %s, "
        "\"itl_ms\": %s, \"e2e_s\": %s, \"burstiness\": %g, \"slo_met\": %d, \"goodput\": %.6f}\n",
        JsonQuote(absl::GetFlag(FLAGS_target)), JsonQuote(absl::GetFlag(FLAGS_rate)), sent, ok,
        sent - ok, absl::StrJoin(codes, ", "), dur, dur > 0 ? ok / dur : 0, long(output_tokens),
        dur > 0 ? output_tokens / dur : 0, StatsJson(ttft, 1e3), StatsJson(tpot, 1e3),
        StatsJson(itl, 1e3), StatsJson(e2e, 1), absl::GetFlag(FLAGS_burstiness), met_slo,
        goodput);
  }
  if (!absl::GetFlag(FLAGS_dump_outputs).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_dump_outputs));
    for (int i = 0; i < sent; ++i) {
      const Planned& p = (*plan)[i];
      const Outcome& o = outcomes[i];
      out << absl::StrFormat(
          "{\"index\": %d, \"request_id\": %s, \"prompt_ids\": [%s], \"prompt_text\": %s, "
          "\"output_ids\": [%s], \"status\": \"%s\", \"finish_reason\": %s, \"seed\": %d, "
          "\"temperature\": %g, \"top_k\": %d, \"max_new_tokens\": %d, \"ignore_eos\": %s%s}\n",
          i, JsonQuote(p.request.request_id()), absl::StrJoin(p.prompt_ids, ", "),
          JsonQuote(p.prompt_text), absl::StrJoin(o.output_ids, ", "), StatusCodeName(o.code),
          JsonQuote(o.finish_reason), p.request.sampling().seed(), p.request.sampling().temperature(),
          p.request.sampling().top_k(), p.request.stopping().max_new_tokens(),
          p.request.stopping().ignore_eos() ? "true" : "false",
          o.code == grpc::StatusCode::OK ? "" : absl::StrCat(", \"message\": ", JsonQuote(o.message)));
    }
  }
  if (!absl::GetFlag(FLAGS_plot).empty()) {
    const std::string title = absl::StrFormat(
        "%s: %d requests at %s req/s (burstiness %g), %d completed",
        absl::GetFlag(FLAGS_chat) ? "HTTP chat" : OverHttp() ? "HTTP" : "gRPC", sent, absl::GetFlag(FLAGS_rate),
        absl::GetFlag(FLAGS_burstiness), ok);
    if (absl::Status st = Plot(absl::GetFlag(FLAGS_plot), outcomes, sent, title); !st.ok()) {
      std::fprintf(stderr, "flover_loadgen: %s\n", std::string(st.message()).c_str());
      return 3;
    }
  }
  return ok == sent ? 0 : 1;
}

}  // namespace
}  // namespace flover::clients

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return flover::clients::Run();
}
