#include "server/reply_stream.h"

#include <httplib.h>

#include <optional>
#include <utility>
#include <vector>

namespace flover::server {

void StreamReply(httplib::Response& res, Engine& engine, RequestId id, std::shared_ptr<CollectingSink> sink,
                 const ReplyReader::Options& options, ReplyEvents events) {
  struct State {
    explicit State(const ReplyReader::Options& o) : reader(o) {}
    bool started = false, finished = false;
    ReplyReader reader;
  };
  auto state = std::make_shared<State>(options);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state, sink, events = std::move(events)](size_t, httplib::DataSink& out) {
        std::string chunk;
        if (!state->started) {
          state->started = true;
          chunk += events.start();
        }
        std::vector<TokenEvent> tokens;
        std::optional<FinishEvent> finish;
        sink->Take(&tokens, &finish, absl::Milliseconds(100));
        std::string text;
        for (const TokenEvent& t : tokens) text += t.text;
        if (finish.has_value()) text += finish->text;
        for (const ReplyReader::Event& e : state->reader.Push(text)) chunk += events.event(e);
        if (finish.has_value()) {
          state->finished = true;
          if (absl::Status st = EndStatus(*finish); !st.ok()) {
            chunk += events.error(st);
          } else {
            for (const ReplyReader::Event& e : state->reader.Finish()) chunk += events.event(e);
            chunk += events.end(*finish, state->reader.calls());
          }
        }
        // A failed write means the client left: the releaser cancels.
        if (!chunk.empty() && !out.write(chunk.data(), chunk.size())) return false;
        if (state->finished) out.done();
        return true;
      },
      [&engine, state, id](bool) {
        if (!state->finished) (void)engine.Cancel(id);  // freed at the next step
      });
}

absl::Status CheckApiKey(const ApiKeys* keys, Engine& engine, const std::string& authorization) {
  if (keys == nullptr) return absl::OkStatus();
  absl::Status st = keys->Check(authorization);
  return st.ok() ? st : CountRefusal(engine, st);
}

}  // namespace flover::server
