// Marks calls into third-party libraries on the current thread.
//
// typeflow's own training step allocates nothing. oneDNN 2.6's execute()
// builds a std::unordered_map of its arguments on every call, which its
// public API offers no way to avoid; the allocation test uses this marker to
// tell those allocations from typeflow's and reports both.
#pragma once

namespace typeflow::detail {

inline thread_local int foreign_call_depth = 0;

struct foreign_call_scope {
  foreign_call_scope() noexcept { ++foreign_call_depth; }
  ~foreign_call_scope() { --foreign_call_depth; }
  foreign_call_scope(const foreign_call_scope&) = delete;
  foreign_call_scope& operator=(const foreign_call_scope&) = delete;
};

}  // namespace typeflow::detail
