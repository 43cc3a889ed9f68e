// The state memory over the real daemon: this test process plays the model
// runner. It maps the region Attach returns (POSIX shared memory, another
// process than the daemon), writes a distinct pattern into the slots it is
// handed, and checks that every byte is where the protocol says after
// checkpoint -> resume, snapshot -> resume, copy, and a shrink that relocates
// live and checkpointed slots; and that the shrink gives memory back.
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "client/state_memory.h"
#include "daemon/device/host_region.h"
#include "gtest/gtest.h"
#include "tests/integration/attach_session.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

// 4 layers of a bf16 conv (3 x 64) and an f32 ssm (4 x 16 x 16).
constexpr char kLayoutJson[] = R"({"name": "it-small", "num_layers": 4,
  "tensors": [{"name": "conv", "dtype": "bf16", "shape": [3, 64]},
              {"name": "ssm", "dtype": "f32", "shape": [4, 16, 16]}]})";

class MemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> dir = TempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_.emplace(*std::move(dir));
    const std::string layout = dir_->path() + "/layout.json";
    std::ofstream(layout) << kLayoutJson;
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        DaemonProcess::Start(WithIdentity(
            {"--layout=" + layout, "--num_slots=12", "--transfer=fork",
             "--fork_tokens=1", "--readable_midstep=true"}));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    stubs_ = std::make_unique<RawStubs>(daemon_->address());

    v1::AttachResponse resp;
    session_ = AttachSession(*stubs_, "memory-test", &resp);
    ASSERT_FALSE(session_.empty());
    ASSERT_TRUE(resp.has_memory());
    ASSERT_EQ(resp.memory().backend(), "host");
    absl::StatusOr<RegionExport> region =
        RegionFromStateMemory(resp.memory().SerializeAsString());
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *region;
    absl::StatusOr<HostRegion> mapped = HostRegion::Open(region_);
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    mapped_.emplace(*std::move(mapped));
  }

  // Writes bytes derived from (seed, piece, offset) into every piece of
  // `slot`; Holds checks them.
  void Fill(int64_t slot, uint32_t seed) {
    ForEachPiece(slot, [&](absl::Span<uint8_t> bytes, int piece) {
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = Byte(seed, piece, i);
    });
  }
  bool Holds(int64_t slot, uint32_t seed) {
    bool ok = true;
    ForEachPiece(slot, [&](absl::Span<uint8_t> bytes, int piece) {
      for (size_t i = 0; i < bytes.size() && ok; ++i) {
        ok = bytes[i] == Byte(seed, piece, i);
      }
    });
    return ok;
  }
  static uint8_t Byte(uint32_t seed, int piece, size_t i) {
    return static_cast<uint8_t>((seed * 131 + piece * 17 + i * 7 + (i >> 8)) ^
                                (seed >> 3));
  }
  template <typename F>
  void ForEachPiece(int64_t slot, F f) {
    int piece = 0;
    for (int64_t layer = 0; layer < region_.layout.num_layers(); ++layer) {
      for (int t = 0; t < region_.layout.num_tensors(); ++t) {
        f(mapped_->PieceBytes(t, layer, slot), piece++);
      }
    }
  }

  v1::StepResponse Step(const std::vector<v1::Operation>& ops) {
    v1::StepRequest req;
    req.set_session_id(session_);
    for (const v1::Operation& op : ops) *req.add_operations() = op;
    v1::StepResponse resp;
    grpc::Status s = stubs_->scheduler->Step(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (const auto& r : resp.results()) {
      EXPECT_EQ(r.code(), 0) << r.message();
    }
    return resp;
  }
  static v1::Operation BeginPass() {
    v1::Operation op;
    op.mutable_begin_pass();
    return op;
  }
  static v1::Operation Admit(const std::string& id, int width,
                             const std::vector<int64_t>& hashes, int kv_hit) {
    v1::Operation op;
    v1::Admit* a = op.mutable_admit();
    a->set_request_id(id);
    a->set_width(width);
    a->set_num_tokens(static_cast<int64_t>(hashes.size()) * kBlock + 10);
    a->set_anchor_pos(static_cast<int64_t>(hashes.size()) * kBlock);
    for (int64_t h : hashes) a->add_block_hashes(h);
    a->set_kv_hit_blocks(kv_hit);
    return op;
  }
  static v1::Operation Release(const std::string& id) {
    v1::Operation op;
    op.mutable_release()->set_request_id(id);
    return op;
  }
  uint64_t AllocatedBytes() {
    struct stat st {};
    EXPECT_EQ(::stat(("/dev/shm" + region_.handle).c_str(), &st), 0);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  std::optional<TempDir> dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<RawStubs> stubs_;
  std::string session_;
  RegionExport region_;
  std::optional<HostRegion> mapped_;
};

TEST_F(MemoryTest, TheRegionFollowsTheSocketsDirectory) {
  // Engines reach the socket through its directory's group, so the region
  // they map is open to that group when the directory lets the group in,
  // and closed to it otherwise. This daemon's directory is private (0700):
  // only the daemon's user may reach the socket, and map the state.
  // (python.access: a shared directory, mapped by a second uid.)
  struct stat dir_st {};
  struct stat region_st {};
  ASSERT_EQ(::stat(("/dev/shm" + region_.handle).c_str(), &region_st), 0);
  const std::string& socket = daemon_->socket_path();
  const std::string dir = socket.substr(0, socket.rfind('/'));
  ASSERT_EQ(::stat(dir.c_str(), &dir_st), 0);
  ASSERT_EQ(dir_st.st_mode & 0070, 0u);
  EXPECT_EQ(region_st.st_mode & 0777, 0600u);
  EXPECT_EQ(region_st.st_uid, ::geteuid());
  EXPECT_EQ(region_st.st_gid, ::getegid());
}

TEST_F(MemoryTest, CheckpointThenResumeReadsTheCheckpointedBytes) {
  const std::vector<int64_t> turn1 = {1001, 1002};
  auto r = Step({BeginPass(), Admit("a", 1, turn1, 0)});
  const int64_t a = r.results(1).admit().slots(0);
  Fill(a, 1);  // the forward wrote a's state as of 2 blocks
  v1::Operation ckpt;
  ckpt.mutable_checkpoint()->set_request_id("a");
  ckpt.mutable_checkpoint()->set_boundary_blocks(2);
  ckpt.mutable_checkpoint()->set_hash(turn1.back());
  auto c = Step({ckpt});
  ASSERT_TRUE(c.results(0).checkpoint().kept());
  ASSERT_EQ(c.results(0).checkpoint().fork_src(), a);
  const int64_t a2 = c.results(0).checkpoint().state_slot();
  Fill(a2, 2);  // a's next forward writes its fresh slot
  Step({BeginPass(), Release("a")});
  Step({BeginPass()});  // the checkpoint's pin clears: filed, free

  // The next turn resumes at 2 blocks and forks from the checkpoint: the
  // source the runner reads must hold what a wrote before the checkpoint.
  auto b = Step({BeginPass(), Admit("b", 1, {1001, 1002, 1003}, 3)});
  const v1::AdmitResult& adm = b.results(1).admit();
  ASSERT_EQ(adm.blocks_resumed(), 2);
  ASSERT_EQ(adm.fork_src(), a);
  EXPECT_TRUE(Holds(adm.fork_src(), 1));
  EXPECT_NE(adm.slots(0), adm.fork_src());
}

TEST_F(MemoryTest, SnapshotCopiesTheCommittedSlotAndResumesFromIt) {
  auto r = Step({BeginPass(), Admit("c", 1, {2001, 2002}, 0)});
  const int64_t c = r.results(1).admit().slots(0);
  Fill(c, 3);
  v1::Operation snap;
  snap.mutable_snapshot()->set_request_id("c");
  snap.mutable_snapshot()->set_position(2 * kBlock);
  snap.mutable_snapshot()->set_hash(2002);
  auto s = Step({snap});
  ASSERT_TRUE(s.results(0).snapshot().kept());
  const int64_t copy = s.results(0).snapshot().slot();
  ASSERT_NE(copy, c);
  EXPECT_TRUE(Holds(copy, 3)) << "the daemon did not copy the committed slot";
  Fill(c, 4);  // c runs on; the snapshot must not follow
  EXPECT_TRUE(Holds(copy, 3));
  Step({Release("c")});
  auto d = Step({BeginPass(), Admit("d", 1, {2001, 2002, 2003}, 3)});
  ASSERT_EQ(d.results(1).admit().fork_src(), copy);
  EXPECT_TRUE(Holds(copy, 3));
}

TEST_F(MemoryTest, CopyMovesARollbackSlotIntoTheCommittedOne) {
  auto r = Step({BeginPass(), Admit("e", 2, {3001}, 0)});
  const auto& slots = r.results(1).admit().slots();
  Fill(slots[0], 5);
  Fill(slots[1], 6);
  v1::Operation copy;
  copy.mutable_copy()->set_request_id("e");
  copy.mutable_copy()->set_from_index(1);
  copy.mutable_copy()->set_to_index(0);
  auto c = Step({copy});
  EXPECT_EQ(c.results(0).copy().bytes(), region_.layout.bytes_per_slot());
  EXPECT_TRUE(Holds(slots[0], 6));
  EXPECT_TRUE(Holds(slots[1], 6));
}

TEST_F(MemoryTest, ShrinkRelocatesLiveAndCheckpointedSlotsAndReturnsMemory) {
  // Fill the pool, then free the low slots: the top holds a live request and
  // a checkpoint, with vacant room below.
  std::vector<v1::Operation> admits = {BeginPass()};
  for (int i = 0; i < 12; ++i) {
    admits.push_back(Admit("r" + std::to_string(i), 1, {int64_t{5000} + i}, 0));
  }
  auto r = Step(admits);
  std::map<std::string, int64_t> slot_of;
  for (int i = 0; i < 12; ++i) {
    slot_of["r" + std::to_string(i)] = r.results(1 + i).admit().slots(0);
    Fill(slot_of["r" + std::to_string(i)], 100 + i);
  }
  ASSERT_EQ(slot_of["r11"], 11);
  // r10 (slot 10) files a checkpoint of its slot: checkpoint needs a free
  // slot, so release the low ones first.
  Step({Release("r0"), Release("r1"), Release("r2"), Release("r3"),
        Release("r4"), Release("r5")});
  v1::Operation ckpt;
  ckpt.mutable_checkpoint()->set_request_id("r10");
  ckpt.mutable_checkpoint()->set_boundary_blocks(1);
  ckpt.mutable_checkpoint()->set_hash(5010);
  auto c = Step({ckpt});
  ASSERT_EQ(c.results(0).checkpoint().fork_src(), 10);
  Step({BeginPass(), Release("r10")});
  Step({BeginPass()});  // slot 10 now a free checkpoint holding pattern 110

  const uint64_t before = AllocatedBytes();
  v1::ResizeRequest resize;
  resize.set_target_slots(8);
  v1::ResizeResponse done;
  // The operator's call waits while the engine runs its passes: the live
  // r11 moves in one of its session's begin_passes, which reports it.
  std::future<grpc::Status> resized = std::async(std::launch::async, [&] {
    return stubs_->admin->Resize(Ctx().get(), resize, &done);
  });
  int64_t r11 = -1;
  while (resized.wait_for(std::chrono::seconds(0)) !=
         std::future_status::ready) {
    auto p = Step({BeginPass()});
    for (const auto& move : p.results(0).begin_pass().moves()) {
      if (move.request_id() == "r11") {
        EXPECT_EQ(move.from_slot(), 11);
        r11 = move.to_slot();
      }
    }
  }
  grpc::Status st = resized.get();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(done.num_slots(), 8);
  EXPECT_GE(done.relocated(), 2);

  // The live request (r11 on slot 11) was told where it went; its bytes are
  // there. The checkpoint (hash 5010) moved with its bytes too.
  ASSERT_GE(r11, 0) << "r11 was not reported moved";
  ASSERT_LT(r11, 8);
  EXPECT_TRUE(Holds(r11, 111));
  v1::Operation lookup;
  lookup.mutable_lookup()->set_hash(5010);
  auto l = Step({lookup});
  const int64_t ck = l.results(0).lookup().slot();
  ASSERT_GE(ck, 0);
  ASSERT_LT(ck, 8);
  EXPECT_TRUE(Holds(ck, 110));
  // Untouched live requests kept their bytes.
  EXPECT_TRUE(Holds(slot_of["r6"], 106));
  EXPECT_TRUE(Holds(slot_of["r7"], 107));

  // The tail's memory went back to the system.
  const uint64_t after = AllocatedBytes();
  EXPECT_LT(after, before) << "before=" << before << " after=" << after;
  v1::GetStatsResponse stats;
  ASSERT_TRUE(
      stubs_->admin->GetStats(Ctx().get(), v1::GetStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.state_bytes(), after);
  EXPECT_EQ(stats.backend(), "host");
}

}  // namespace
}  // namespace statecache::testing

namespace statecache::testing {
namespace {

// The same through the C++ client library: Attach's typed view of the
// memory, and the copy engine's operations from the StepBuilder.
TEST_F(MemoryTest, ClientLibraryMapsTheRegionAndCopies) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(daemon_->address(), ClientOptions{});
  ASSERT_TRUE(client.ok()) << client.status();
  ModelIdentity identity = TestIdentity();
  identity.layout_fingerprint = region_.layout_fingerprint;
  absl::StatusOr<SessionInfo> session = (*client)->Attach(identity, "lib");
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<RegionExport> region =
      RegionFromStateMemory(session->state_memory);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->handle, region_.handle);
  EXPECT_EQ(region->layout.bytes_per_slot(), region_.layout.bytes_per_slot());

  StepBuilder admit;
  const std::vector<int64_t> hashes = {7001};
  admit.Admit("lib-req", 2, 100, 64, hashes, 0);
  absl::StatusOr<StepResults> r = (*client)->Step(admit);
  ASSERT_TRUE(r.ok()) << r.status();
  auto adm = r->Get<AdmitResult>(0);
  ASSERT_TRUE(adm.ok()) << adm.status();
  Fill(adm->slots[1], 42);
  StepBuilder copy;
  copy.Copy("lib-req", 1, 0).Snapshot("lib-req", 64, 7001);
  absl::StatusOr<StepResults> c = (*client)->Step(copy);
  ASSERT_TRUE(c.ok()) << c.status();
  auto copied = c->Get<CopyOpResult>(0);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->bytes, region_.layout.bytes_per_slot());
  EXPECT_TRUE(Holds(adm->slots[0], 42));
  auto snap = c->Get<SnapshotResult>(1);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE(snap->kept);
  EXPECT_TRUE(Holds(snap->slot, 42));

  // A client built for another layout is refused at Attach.
  absl::StatusOr<std::unique_ptr<Client>> other =
      Client::Connect(daemon_->address(), ClientOptions{});
  ASSERT_TRUE(other.ok()) << other.status();
  identity.layout_fingerprint = "0000000000000000";
  absl::StatusOr<SessionInfo> wrong = (*other)->Attach(identity, "lib");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition)
      << wrong.status();
  EXPECT_NE(wrong.status().message().find("layout_fingerprint"),
            std::string::npos)
      << wrong.status();
}

}  // namespace
}  // namespace statecache::testing
