// Remote images: --image_url_hosts' parsing, and fetches from a real HTTP
// server on loopback (an ephemeral port): a named host's image arrives
// whole; a host not named, a redirect, an error status, a body past the
// limit and a scheme other than http(s) are refused naming why.
#include "server/image_fetch.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace flover::server {
namespace {

TEST(ImageFetchTest, ParsesHostsAndRefusesWhatIsNotOne) {
  auto hosts = ParseImageHosts(" Images.Example.com, 127.0.0.1:8080 ,");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts, (std::vector<std::string>{"images.example.com", "127.0.0.1:8080"}));
  for (const char* bad : {"http://example.com", "example.com/path", "host:0", "host:99999", "*.example.com"}) {
    auto r = ParseImageHosts(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("is not a host or host:port"), std::string::npos) << r.status();
  }
  EXPECT_TRUE(ParseImageHosts("")->empty());
}

TEST(ImageFetchTest, FetchesOnlyFromNamedHostsOnLoopback) {
  httplib::Server server;
  const std::string image(3000, 'x');
  server.Get("/a.png", [&](const httplib::Request&, httplib::Response& res) { res.set_content(image, "image/png"); });
  server.Get("/big.png", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(5000, 'y'), "image/png");
  });
  server.Get("/moved.png", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/a.png"); });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });

  ImageFetchOptions o;
  o.max_bytes = 4096;
  const std::string base = absl::StrCat("http://127.0.0.1:", port);
  auto off = FetchImage(base + "/a.png", o);
  EXPECT_NE(off.status().message().find("remote image URLs are off"), std::string::npos) << off.status();
  o.hosts = {"images.example.com"};
  auto other = FetchImage(base + "/a.png", o);
  EXPECT_NE(other.status().message().find(absl::StrCat("the host 127.0.0.1:", port,
                                                       " is not one this server fetches images from")),
            std::string::npos)
      << other.status();
  for (const std::string& entry : {absl::StrCat("127.0.0.1:", port), std::string("127.0.0.1")}) {
    o.hosts = {entry};
    auto got = FetchImage(base + "/a.png?size=1#frag", o);
    ASSERT_TRUE(got.ok()) << entry << ": " << got.status();
    EXPECT_EQ(*got, image);
  }
  auto big = FetchImage(base + "/big.png", o);
  EXPECT_NE(big.status().message().find("is more than 4096 bytes"), std::string::npos) << big.status();
  auto moved = FetchImage(base + "/moved.png", o);
  EXPECT_NE(moved.status().message().find("gave HTTP 302 (redirects are not followed)"), std::string::npos)
      << moved.status();
  auto missing = FetchImage(base + "/missing.png", o);
  EXPECT_NE(missing.status().message().find("gave HTTP 404"), std::string::npos) << missing.status();
  auto ftp = FetchImage(absl::StrCat("ftp://127.0.0.1:", port, "/a.png"), o);
  EXPECT_NE(ftp.status().message().find("only data:, http:// and https:// URLs"), std::string::npos) << ftp.status();
  auto userinfo = FetchImage(absl::StrCat("http://user@127.0.0.1:", port, "/a.png"), o);
  EXPECT_NE(userinfo.status().message().find("is not a host name"), std::string::npos) << userinfo.status();
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace flover::server
