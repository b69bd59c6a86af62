// attnlab::api::DistributedSession (include/attnlab/distributed.h) over core/distributed.h.
#include "attnlab/distributed.h"

#include <memory>

#include "core/distributed.h"
#include "core/error.h"

namespace attnlab::api {

namespace {
// The one session of the process (core/distributed.h: one per process).
std::unique_ptr<distributed::Session> g_session;
}  // namespace

DistributedSession::DistributedSession(int* argc, char*** argv) {
  if (g_session) fail("DistributedSession: a process has one session, and this one has one already");
  g_session = std::make_unique<distributed::Session>(argc, argv);
}

DistributedSession::~DistributedSession() { g_session.reset(); }

int DistributedSession::rank() const { return distributed::rank(); }
int DistributedSession::size() const { return distributed::size(); }
bool DistributedSession::built_with_mpi() { return distributed::built_with_mpi(); }
int DistributedSession::process_rank() { return distributed::rank(); }

}  // namespace attnlab::api
