// ArenaMessageAllocator: gRPC's per-call message allocator backed by one
// protobuf Arena per call, so parsing a Step with hundreds of operations and
// building its results cost a few block allocations instead of one heap
// allocation per repeated field and sub-message (and the whole lot is freed
// at once when the call ends).
//
// Thread safety: thread-safe (each call gets its own arena).
#ifndef STATECACHE_DAEMON_GRPC_ARENA_ALLOCATOR_H_
#define STATECACHE_DAEMON_GRPC_ARENA_ALLOCATOR_H_

#include <google/protobuf/arena.h>
#include <grpcpp/support/message_allocator.h>

#include "proto/message_arena.h"

namespace statecache {

template <typename Request, typename Response>
class ArenaMessageAllocator final
    : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    return new Holder();
  }

 private:
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() {
      this->set_request(
          google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(
          google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }
    void Release() override { delete this; }

   private:
    google::protobuf::Arena arena_{MessageArenaOptions()};
  };
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_GRPC_ARENA_ALLOCATOR_H_
