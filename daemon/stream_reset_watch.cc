#include "daemon/stream_reset_watch.h"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace statecache {
namespace {

// Ids past the last channelz socket found that Resolve still tries: other
// channelz entities (the server) and sockets already gone leave gaps.
constexpr int kIdGap = 32;

// One channelz query's JSON, freed with gRPC's allocator.
class ChannelzJson {
 public:
  explicit ChannelzJson(char* json) : json_(json) {}
  ~ChannelzJson() {
    if (json_ != nullptr) gpr_free(json_);
  }
  ChannelzJson(const ChannelzJson&) = delete;
  ChannelzJson& operator=(const ChannelzJson&) = delete;
  bool ok() const { return json_ != nullptr; }
  absl::string_view text() const { return json_ != nullptr ? json_ : ""; }

 private:
  char* const json_;
};

// The string value of `"key":"..."` after `from`; empty when absent.
absl::string_view StringAfter(absl::string_view json, absl::string_view key,
                              size_t from = 0) {
  const std::string quoted = absl::StrCat("\"", key, "\":\"");
  const size_t at = json.find(quoted, from);
  if (at == absl::string_view::npos) return {};
  const size_t begin = at + quoted.size();
  const size_t end = json.find('"', begin);
  return end == absl::string_view::npos ? absl::string_view()
                                        : json.substr(begin, end - begin);
}

// A channelz counter (an int64 JSON-encoded as a string); 0 when absent,
// as channelz leaves out counters that are 0.
int64_t Count(absl::string_view json, absl::string_view key) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(StringAfter(json, key), &value)) return 0;
  return value;
}

int64_t Allowed(const StreamResetWatch::Options& options,
                absl::Duration since) {
  // A minute at most: the count of streams allowed stays far from overflow.
  const double seconds = std::clamp(absl::ToDoubleSeconds(since), 0.0, 60.0);
  return options.max_open_streams +
         static_cast<int64_t>(
             seconds * static_cast<double>(options.max_resets_per_second));
}

}  // namespace

void StreamResetWatch::Watch(int fd, std::string name) {
  watched_[fd] = Watched{.name = std::move(name)};
}

void StreamResetWatch::Forget(int fd) { watched_.erase(fd); }

void StreamResetWatch::Resolve() {
  const bool any_unresolved =
      std::any_of(watched_.begin(), watched_.end(),
                  [](const auto& w) { return w.second.socket_id == 0; });
  if (!any_unresolved) return;
  for (intptr_t id = next_socket_id_, misses = 0; misses < kIdGap;
       ++id, ++misses) {
    const ChannelzJson socket(grpc_channelz_get_socket(id));
    if (!socket.ok()) continue;
    misses = -1;  // the loop's ++ makes it 0
    next_socket_id_ = id + 1;
    // "ref":{"name":"chttp2 fd:12", ...}: the name gRPC gave it.
    const absl::string_view name =
        StringAfter(socket.text(), "name", socket.text().find("\"ref\""));
    for (auto& [fd, watched] : watched_) {
      if (watched.socket_id == 0 &&
          (name == watched.name ||
           absl::EndsWith(name, absl::StrCat(" ", watched.name)))) {
        watched.socket_id = id;
        break;
      }
    }
  }
}

int64_t StreamResetWatch::ServerUnfinished() {
  if (server_id_ == 0) {
    const ChannelzJson servers(grpc_channelz_get_servers(0));
    int64_t id = 0;
    if (!absl::SimpleAtoi(StringAfter(servers.text(), "serverId"), &id)) {
      return -1;
    }
    server_id_ = static_cast<intptr_t>(id);
  }
  const ChannelzJson server(grpc_channelz_get_server(server_id_));
  if (!server.ok()) return -1;
  return Count(server.text(), "callsStarted") -
         Count(server.text(), "callsSucceeded");
}

std::vector<int> StreamResetWatch::Check(absl::Time now) {
  std::vector<int> abusers;
  const absl::Duration since = last_look_ == absl::InfinitePast()
                                   ? absl::ZeroDuration()
                                   : now - last_look_;
  last_look_ = now;
  // Server-wide first: while few calls go unfinished, no connection can
  // have abandoned many, and its readings are let go (taken afresh when
  // needed, so an old reading never stretches what is allowed).
  const int64_t server = ServerUnfinished();
  const bool quiet = server >= 0 && server_unfinished_ >= 0 &&
                     server - server_unfinished_ <= Allowed(options_, since);
  server_unfinished_ = server;
  if (quiet) {
    for (auto& [fd, watched] : watched_) watched.unfinished = -1;
    return abusers;
  }
  Resolve();
  for (auto& [fd, watched] : watched_) {
    if (watched.socket_id == 0) continue;
    const ChannelzJson socket(grpc_channelz_get_socket(watched.socket_id));
    if (!socket.ok()) continue;  // closed: Forget comes
    const int64_t unfinished = Count(socket.text(), "streamsStarted") -
                               Count(socket.text(), "streamsSucceeded");
    if (watched.unfinished >= 0 &&
        unfinished - watched.unfinished > Allowed(options_, since)) {
      abusers.push_back(fd);
    }
    watched.unfinished = unfinished;
  }
  return abusers;
}

}  // namespace statecache
