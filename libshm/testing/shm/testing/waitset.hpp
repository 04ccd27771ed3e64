// Test-only: make WaitSet::make() behave as on a kernel without futex_waitv
// (Linux older than 5.16), so the refusal is tested on any kernel. Not
// installed: only the shm_testing target (tests) sees libshm/testing/.
#pragma once

namespace shm::test_hooks {

// While on, WaitSet::make() refuses as it does when the kernel lacks futex_waitv.
void pretend_no_futex_waitv(bool on) noexcept;

}  // namespace shm::test_hooks
