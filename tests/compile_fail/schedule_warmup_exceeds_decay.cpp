// expected-error: rules::warmup_steps_must_not_exceed_decay_steps
//
// A schedule's constructor is constexpr and checks its arguments, so a schedule
// declared constexpr with a bad argument is refused by the compiler: here a
// warmup of 6000 steps in front of a cosine decay of 5000. (At run time the
// same check throws std::invalid_argument:
//   cosine_decay: warmup_steps (6000) must not exceed decay_steps (5000).)
#include <typeflow/schedules/schedules.hpp>

namespace tf = typeflow;

constexpr tf::schedules::cosine_decay schedule{1e-3, 5000, {.warmup_steps = 6000}};

int main() { return schedule(0) > 0.0 ? 0 : 1; }
