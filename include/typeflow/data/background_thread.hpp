// background_thread(f): how pipeline stages (map's workers, prefetch's
// producer) start their threads.
//
// A pipeline thread is background work for the training step, which runs on
// the consumer's thread and oneDNN's OpenMP team. When the consumer hands a
// slot back and wakes a producer, Linux would by default let the woken thread
// preempt whatever runs on that core, the step included: on a machine with
// few cores, where libgomp's idle team threads also spin on the others, a
// prefetched pipeline then steals its time from the step (measured on 2
// cores, bench/pipeline_bench: the MNIST MLP's fit with a map of 10 us per
// element waited for prefetched data 20% of the time; under SCHED_BATCH, 0.14%).
// So on Linux these threads run under SCHED_BATCH: the same share of the CPU,
// but a wake-up never preempts. Elsewhere, or if the policy cannot be set,
// they are plain threads.
#pragma once

#include <thread>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace typeflow::data::detail {

template <class F>
std::thread background_thread(F&& function) {
  std::thread thread(std::forward<F>(function));
#if defined(__linux__)
  sched_param parameters{};
  parameters.sched_priority = 0;  // the only priority SCHED_BATCH takes; needs no privilege
  (void)pthread_setschedparam(thread.native_handle(), SCHED_BATCH, &parameters);
#endif
  return thread;
}

}  // namespace typeflow::data::detail
