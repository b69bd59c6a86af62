// core/distributed.h without MPI (ATTNLAB_MPI off): one process, rank 0 of 1; the item queue hands
// out its items in order.
#include <algorithm>

#include "core/distributed.h"
#include "core/error.h"

namespace attnlab::distributed {

bool built_with_mpi() { return false; }

Session::Session(int*, char***) {
  const int n = launcher_size();
  if (n > 1)
    fail("this attnlab was built without MPI (ATTNLAB_MPI=OFF, or CMake found no MPI) but an MPI launcher started it as one of ", n,
         " processes, which could not coordinate and would all write the same files: install libopenmpi-dev and build again "
         "(docs/distributed.md), or run one process");
}

Session::~Session() = default;

int rank() { return 0; }
int size() { return 1; }

std::string first_error(const std::string& mine) { return mine; }

void abort_job(const std::string& message) { fail(message); }

struct ItemQueue::State {
  std::vector<size_t> items;
  size_t next = 0;
  bool stopped = false;
  ItemEnd worst = ItemEnd::none;
};

ItemQueue::ItemQueue(std::vector<size_t> items) : state_(new State) { state_->items = std::move(items); }

ItemQueue::~ItemQueue() { delete state_; }

std::optional<size_t> ItemQueue::next(ItemEnd previous) {
  state_->worst = std::max(state_->worst, previous);
  if (previous == ItemEnd::stopped || previous == ItemEnd::failed) state_->stopped = true;
  if (state_->stopped || state_->next >= state_->items.size()) return std::nullopt;
  return state_->items[state_->next++];
}

ItemEnd ItemQueue::finish() { return state_->worst; }

// Collectives: one rank holds every sum already; a scatter or gather is a copy.
struct Collectives::State {};

Collectives::Collectives(int, double) : state_(new State) {}
Collectives::~Collectives() { delete state_; }
void Collectives::start_sum(float*, size_t) {}
void Collectives::start_sum_scatter(const float* data, float* mine, const int* counts) {
  if (mine != data) std::copy(data, data + counts[0], mine);
}
void Collectives::progress() {}
void Collectives::abort_job(const std::string& message) { distributed::abort_job(message); }
double Collectives::wait_all(const char*) { return 0; }
void Collectives::sum(double*, int, const char*) {}
void Collectives::sum(uint64_t*, int, const char*) {}
void Collectives::gather_all(float*, const int*, const int*, const char*) {}
void Collectives::gather_to_root(const float* mine, float* all, const int* counts, const int* displacements, const char*) {
  std::copy(mine, mine + counts[0], all + displacements[0]);
}

}  // namespace attnlab::distributed
