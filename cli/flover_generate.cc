// flover_generate: runs one prompt through a model and prints
// {"token_ids": [...new tokens...], "text": "..."} (text only when the model
// has a tokenizer). Other tools parse this output; keep its contract.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/generate.h"
#include "util/json.h"
#include "model/model_loader.h"
#include "kernels/backend_factory.h"
#include "kernels/backend_flags.h"
#include "kernels/cpu/cpu_threads.h"

ABSL_FLAG(std::string, model, "", "Model directory or builtin:NAME");
ABSL_FLAG(std::string, prompt, "", "Prompt text (needs a model with a tokenizer)");
ABSL_FLAG(std::string, prompt_ids, "", "Prompt as comma-separated token ids");
ABSL_FLAG(int, max_new_tokens, 16, "Tokens to generate");
ABSL_FLAG(double, temperature, 1.0, "Sampling temperature; 0 is greedy");
ABSL_FLAG(int, top_k, 0, "Keep the k most likely tokens; 0 keeps all");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling mass, in (0, 1]");
ABSL_FLAG(double, repetition_penalty, 1.0, "Repetition penalty (1 = none)");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed");
ABSL_FLAG(bool, ignore_eos, false, "Do not stop at the end-of-text token");
ABSL_FLAG(int, threads, 0, "CPU threads (0 = all cores)");

namespace flover {
namespace {

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("--prompt_ids: '", part, "' is not an integer"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::Status Run() {
  const std::string spec = absl::GetFlag(FLAGS_model);
  if (spec.empty()) return absl::InvalidArgumentError("--model is required");
  const bool has_text = !absl::GetFlag(FLAGS_prompt).empty();
  const bool has_ids = !absl::GetFlag(FLAGS_prompt_ids).empty();
  if (has_text == has_ids) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --prompt_ids");
  }
  kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  // The device first: a missing GPU is reported before a model is loaded.
  auto backend_options = kernels::BackendOptionsFromFlags(  // --device, --dtype, --kv_dtype
      [&](absl::string_view device) { return AutoMatmulDtype(spec, device); });
  if (!backend_options.ok()) return backend_options.status();
  auto backend = kernels::CreateBackend(*backend_options);
  if (!backend.ok()) return backend.status();
  auto model = LoadModel(spec);
  if (!model.ok()) return model.status();
  const ModelInfo& config = (*model)->info();
  const std::shared_ptr<const Tokenizer> tokenizer = (*model)->tokenizer();

  std::vector<int32_t> prompt;
  if (has_text) {
    if (!tokenizer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--prompt: model ", spec, " has no tokenizer; use --prompt_ids"));
    }
    auto ids = tokenizer->Encode(absl::GetFlag(FLAGS_prompt));
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("--prompt: ", ids.status().message()));
    prompt = *ids;
  } else {
    auto ids = ParseIds(absl::GetFlag(FLAGS_prompt_ids));
    if (!ids.ok()) return ids.status();
    prompt = *ids;
    for (int32_t id : prompt) {
      if (id < 0 || id >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--prompt_ids: token id ", id, " is outside the vocabulary (", config.vocab_size, ")"));
      }
    }
  }

  GenerateOptions options;
  options.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  options.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  options.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  options.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  options.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  options.sampling.repetition_penalty = static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty));
  options.sampling.seed = absl::GetFlag(FLAGS_seed);

  // The context this run needs (a LongRoPE model takes its long factors
  // past its original context: LoadedModel::ServeContext).
  (*model)->ServeContext(static_cast<int>(std::min<int64_t>(
      int64_t{static_cast<int64_t>(prompt.size())} + std::max(0, options.max_new_tokens), 1 << 30)));
  auto gpt = (*model)->Instantiate(**backend);
  if (!gpt.ok()) return gpt.status();
  auto output = GenerateAlone(**gpt, prompt, options);
  if (!output.ok()) return output.status();

  std::string json = absl::StrCat("{\"token_ids\": [", absl::StrJoin(*output, ", "), "]");
  if (tokenizer) absl::StrAppend(&json, ", \"text\": ", JsonQuote(tokenizer->Decode(*output)));
  json += "}\n";
  std::fputs(json.c_str(), stdout);
  // What it ran on (the CPU's line names the instruction set in use), on
  // stderr after the result: stdout stays one JSON line, and an error stays
  // the only line on stderr.
  const kernels::DeviceInfo device = (*backend)->Device();
  std::fprintf(stderr, "device %s: %s\n", device.kind.c_str(), device.name.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "flover_generate --model=DIR|builtin:NAME (--prompt=TEXT | --prompt_ids=1,2,3) "
      "--max_new_tokens=N [--temperature=T --top_k=K --top_p=P --seed=S --ignore_eos]");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "flover_generate: unexpected argument '%s'\n", rest[1]);
    return 2;
  }
  const absl::Status st = flover::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "flover_generate: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
