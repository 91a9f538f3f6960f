#!/usr/bin/env python3
"""Writes schedules.json: the learning rates that typeflow's schedules must give.

Each schedule is transcribed here from Keras 3's code
(keras/src/optimizers/schedules/learning_rate_schedule.py: ExponentialDecay,
PiecewiseConstantDecay, CosineDecay, CosineDecayRestarts), in float64 Python,
independently of the C++ header. Where PyTorch has the same curve the values are
cross-checked against it:
  exponential_decay, decay_steps = 1  vs torch.optim.lr_scheduler.ExponentialLR
  cosine_decay without warmup         vs CosineAnnealingLR(T_max=decay_steps, eta_min=alpha*lr)
  cosine_decay_restarts, m_mul = 1,   vs CosineAnnealingWarmRestarts(T_0=first_decay_steps,
    integer t_mul                          T_mult=t_mul, eta_min=alpha*lr)
The restart index of cosine_decay_restarts comes from a second, loop-based
computation (walk the periods one by one), and the values are also checked
against Keras's code run in float32 (Keras's default dtype), which agrees at
every step; Keras's code in float64 (and torch's closed form) can floor the log
one period early exactly at a restart, which the JSON notes where it happens.

typeflow's own schedules (inverse_sqrt, linear_warmup) and its one extension of
CosineDecay (warmup_steps without warmup_target) are written from their doc
comments in include/typeflow/schedules/schedules.hpp.

The test suite reads only the JSON; run this (python3 with torch) to regenerate:
  python3 tests/reference/schedules_reference.py
"""

import json
import math
import pathlib
import warnings

import numpy as np
import torch

RELATIVE_TOLERANCE = 1e-12  # for the cross-checks in float64


# --- Keras 3, transcribed ----------------------------------------------------

def keras_exponential_decay(initial_learning_rate, decay_steps, decay_rate, staircase=False):
    def schedule(step):
        p = float(step) / float(decay_steps)
        if staircase:
            p = math.floor(p)
        return initial_learning_rate * decay_rate ** p
    return schedule


def keras_piecewise_constant(boundaries, values):
    assert len(boundaries) == len(values) - 1

    def schedule(step):
        # Keras sums indicator * value over the intervals.
        result = 0.0
        result += (step <= boundaries[0]) * values[0]
        result += (step > boundaries[-1]) * values[-1]
        for low, high, value in zip(boundaries[:-1], boundaries[1:], values[1:-1]):
            result += ((step > low) and (step <= high)) * value
        return float(result)
    return schedule


def keras_cosine_decay(initial_learning_rate, decay_steps, alpha=0.0, warmup_target=None, warmup_steps=0):
    def decay_function(step, decay_steps, decay_from_lr):
        completed_fraction = step / decay_steps
        cosine_decayed = 0.5 * (1.0 + math.cos(math.pi * completed_fraction))
        decayed = (1 - alpha) * cosine_decayed + alpha
        return decay_from_lr * decayed

    def warmup_function(step, warmup_steps, warmup_target, initial_learning_rate):
        completed_fraction = step / warmup_steps
        total_step_delta = warmup_target - initial_learning_rate
        return total_step_delta * completed_fraction + initial_learning_rate

    def schedule(step):
        d = float(decay_steps)
        s = float(step)
        if warmup_target is None:
            s = min(s, d)
            return decay_function(s, d, initial_learning_rate)
        w = float(warmup_steps)
        s = min(s, d + w)
        if s < w:
            return warmup_function(s, w, warmup_target, initial_learning_rate)
        return decay_function(s - w, d, warmup_target)
    return schedule


def keras_cosine_decay_restarts_literal(initial_learning_rate, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0):
    """Keras's code as written: the restart index straight from the floored log."""
    def schedule(step):
        completed_fraction = float(step) / float(first_decay_steps)
        if t_mul == 1.0:
            i_restart = math.floor(completed_fraction)
            completed_fraction -= i_restart
        else:
            i_restart = math.floor(math.log(1.0 - completed_fraction * (1.0 - t_mul)) / math.log(t_mul))
            sum_r = (1.0 - t_mul ** i_restart) / (1.0 - t_mul)
            completed_fraction = (completed_fraction - sum_r) / t_mul ** i_restart
        m_fac = m_mul ** i_restart
        cosine_decayed = 0.5 * m_fac * (1.0 + math.cos(math.pi * completed_fraction))
        decayed = (1 - alpha) * cosine_decayed + alpha
        return initial_learning_rate * decayed
    return schedule


def keras_cosine_decay_restarts_float32(initial_learning_rate, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0):
    """Keras's code as written, in float32 as Keras runs it by default (numpy for the ops)."""
    f32 = np.float32

    def schedule(step):
        t = f32(t_mul)
        completed_fraction = f32(step) / f32(first_decay_steps)
        if t_mul == 1.0:
            i_restart = np.floor(completed_fraction)
            completed_fraction = completed_fraction - i_restart
        else:
            i_restart = np.floor(np.log(f32(1.0) - completed_fraction * (f32(1.0) - t)) / np.log(t))
            sum_r = (f32(1.0) - t ** i_restart) / (f32(1.0) - t)
            completed_fraction = (completed_fraction - sum_r) / t ** i_restart
        m_fac = f32(m_mul) ** i_restart
        cosine_decayed = f32(0.5) * m_fac * (f32(1.0) + np.cos(f32(math.pi) * completed_fraction))
        decayed = (f32(1.0) - f32(alpha)) * cosine_decayed + f32(alpha)
        return float(f32(initial_learning_rate) * decayed)
    return schedule


def restart_by_walking(step, first_decay_steps, t_mul):
    """The period a step lies in and the fraction of it done, one period at a time."""
    i, start, length = 0, 0.0, float(first_decay_steps)
    while step >= start + length:
        start += length
        length *= t_mul
        i += 1
    return i, (step - start) / length


def cosine_decay_restarts(initial_learning_rate, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0):
    """Keras's formula with the restart index taken from restart_by_walking."""
    def schedule(step):
        i_restart, completed_fraction = restart_by_walking(step, first_decay_steps, t_mul)
        m_fac = m_mul ** i_restart
        cosine_decayed = 0.5 * m_fac * (1.0 + math.cos(math.pi * completed_fraction))
        decayed = (1 - alpha) * cosine_decayed + alpha
        return initial_learning_rate * decayed
    return schedule


# --- typeflow's own definitions -----------------------------------------------

def inverse_sqrt(learning_rate, warmup_steps):
    def schedule(step):
        if step < warmup_steps:
            return learning_rate * step / warmup_steps
        return learning_rate * math.sqrt(warmup_steps / step)
    return schedule


def typeflow_cosine_decay(initial_learning_rate, decay_steps, alpha=0.0, warmup_target=None, warmup_steps=0):
    """Keras's CosineDecay, except that warmup_steps without warmup_target warms up from 0."""
    if warmup_target is None and warmup_steps > 0:
        return keras_cosine_decay(0.0, decay_steps, alpha, warmup_target=initial_learning_rate,
                                  warmup_steps=warmup_steps)
    return keras_cosine_decay(initial_learning_rate, decay_steps, alpha, warmup_target, warmup_steps)


def linear_warmup(inner, warmup_steps, start=0.0):
    def schedule(step):
        if step < warmup_steps:
            return start + (inner(0) - start) * (step / warmup_steps)
        return inner(step - warmup_steps)
    return schedule


# --- PyTorch cross-checks ------------------------------------------------------

def torch_rates(make_scheduler, base_lr, steps):
    """The closed-form learning rate of a torch scheduler at each step."""
    parameter = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([parameter], lr=base_lr)
    scheduler = make_scheduler(optimizer)
    rates = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # step(epoch) is deprecated, but it is the closed form
        for step in steps:
            scheduler.step(step)
            rates.append(optimizer.param_groups[0]["lr"])
    return rates


def torch_exponential(base_lr, gamma, steps):
    parameter = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([parameter], lr=base_lr)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=gamma)
    rates = {}
    for step in range(max(steps) + 1):
        rates[step] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
    return [rates[s] for s in steps]


def assert_close(ours, theirs, what):
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-15), f"{what}: {a} != {b} (entry {step})"


# --- the cases -----------------------------------------------------------------

def main():
    cases = []

    def add(name, spec, schedule, steps, **extra):
        case = {"name": name, **spec, "steps": steps, "expected": [schedule(s) for s in steps]}
        case.update(extra)
        cases.append(case)
        return case

    # constant
    add("constant", {"schedule": "constant", "args": {"learning_rate": 0.01}},
        lambda s: 0.01, [0, 1, 100, 1_000_000])

    # exponential_decay
    steps = [0, 1, 500, 999, 1000, 1001, 2500, 10_000, 100_000]
    add("exponential_decay continuous",
        {"schedule": "exponential_decay",
         "args": {"initial_learning_rate": 0.1, "decay_steps": 1000, "decay_rate": 0.96, "staircase": False}},
        keras_exponential_decay(0.1, 1000, 0.96), steps)
    add("exponential_decay staircase",
        {"schedule": "exponential_decay",
         "args": {"initial_learning_rate": 0.1, "decay_steps": 1000, "decay_rate": 0.96, "staircase": True}},
        keras_exponential_decay(0.1, 1000, 0.96, staircase=True), [0, 1, 999, 1000, 1001, 1999, 2000, 5500, 100_000])
    steps = [0, 1, 2, 5, 10, 20, 50, 99, 100]
    case = add("exponential_decay per step (torch ExponentialLR)",
               {"schedule": "exponential_decay",
                "args": {"initial_learning_rate": 0.5, "decay_steps": 1, "decay_rate": 0.9, "staircase": False}},
               keras_exponential_decay(0.5, 1, 0.9), steps,
               cross_checked_with="torch.optim.lr_scheduler.ExponentialLR(gamma=0.9)")
    assert_close(case["expected"], torch_exponential(0.5, 0.9, steps), case["name"])

    # piecewise_constant
    boundaries, values = [100, 200, 300], [1.0, 0.5, 0.1, 0.01]
    add("piecewise_constant three boundaries",
        {"schedule": "piecewise_constant", "args": {"boundaries": boundaries, "values": values}},
        keras_piecewise_constant(boundaries, values), [0, 99, 100, 101, 199, 200, 201, 300, 301, 10_000])
    add("piecewise_constant one boundary",
        {"schedule": "piecewise_constant", "args": {"boundaries": [0], "values": [0.1, 0.01]}},
        keras_piecewise_constant([0], [0.1, 0.01]), [0, 1, 2, 1000])

    # inverse_sqrt
    add("inverse_sqrt",
        {"schedule": "inverse_sqrt", "args": {"learning_rate": 1e-3, "warmup_steps": 4000}},
        inverse_sqrt(1e-3, 4000), [0, 1, 2000, 3999, 4000, 4001, 16_000, 64_000, 1_000_000])

    # cosine_decay without warmup: the same curve as torch's CosineAnnealingLR up to decay_steps
    for alpha in (0.0, 0.1):
        steps = [0, 1, 250, 500, 750, 999, 1000, 1001, 5000]
        case = add(f"cosine_decay alpha {alpha} (torch CosineAnnealingLR)",
                   {"schedule": "cosine_decay",
                    "args": {"initial_learning_rate": 0.1, "decay_steps": 1000, "alpha": alpha}},
                   keras_cosine_decay(0.1, 1000, alpha), steps,
                   cross_checked_with=f"torch.optim.lr_scheduler.CosineAnnealingLR(T_max=1000, eta_min={alpha}*0.1)")
        within = [s for s in steps if s <= 1000]  # torch's cosine keeps going past T_max; Keras holds
        theirs = torch_rates(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=1000, eta_min=alpha * 0.1),
                             0.1, within)
        assert_close(case["expected"][:len(within)], theirs, case["name"])

    # cosine_decay with Keras's warmup
    add("cosine_decay warmup from 0 (Keras example)",
        {"schedule": "cosine_decay",
         "args": {"initial_learning_rate": 0.0, "decay_steps": 1000, "alpha": 0.05,
                  "warmup_target": 0.1, "warmup_steps": 100}},
        keras_cosine_decay(0.0, 1000, 0.05, warmup_target=0.1, warmup_steps=100),
        [0, 1, 50, 99, 100, 101, 600, 1099, 1100, 1101, 5000])
    add("cosine_decay warmup from a nonzero rate",
        {"schedule": "cosine_decay",
         "args": {"initial_learning_rate": 0.01, "decay_steps": 400, "alpha": 0.0,
                  "warmup_target": 0.1, "warmup_steps": 100}},
        keras_cosine_decay(0.01, 400, 0.0, warmup_target=0.1, warmup_steps=100),
        [0, 1, 50, 99, 100, 101, 300, 499, 500, 501, 10_000])
    add("cosine_decay warmup_target without warmup steps",
        {"schedule": "cosine_decay",
         "args": {"initial_learning_rate": 0.01, "decay_steps": 1000, "alpha": 0.0,
                  "warmup_target": 0.2, "warmup_steps": 0}},
        keras_cosine_decay(0.01, 1000, 0.0, warmup_target=0.2, warmup_steps=0),
        [0, 1, 500, 999, 1000, 1001])
    add("cosine_decay warmup_steps without warmup_target (typeflow: warms up from 0)",
        {"schedule": "cosine_decay",
         "args": {"initial_learning_rate": 1e-3, "decay_steps": 5000, "alpha": 0.0, "warmup_steps": 500}},
        typeflow_cosine_decay(1e-3, 5000, 0.0, warmup_steps=500),
        [0, 1, 250, 499, 500, 501, 3000, 5499, 5500, 6000],
        note="Keras would ignore warmup_steps here; typeflow warms up from 0 to initial_learning_rate")

    # cosine_decay_restarts
    def add_restarts(name, lr, first, t_mul, m_mul, alpha, steps, torch_check):
        schedule = cosine_decay_restarts(lr, first, t_mul, m_mul, alpha)
        literal = keras_cosine_decay_restarts_literal(lr, first, t_mul, m_mul, alpha)
        literal32 = keras_cosine_decay_restarts_float32(lr, first, t_mul, m_mul, alpha)
        extra = {}
        # Keras in float32, its default: equal to float32 rounding at every step, restarts included.
        for s in steps:
            assert math.isclose(schedule(s), literal32(s), rel_tol=1e-5, abs_tol=1e-6 * lr), \
                f"{name}: Keras in float32 gives {literal32(s)} at step {s}, not {schedule(s)}"
        # The same code in float64 can floor the log one period early, exactly at a restart.
        misfloored = [s for s in steps
                      if not math.isclose(schedule(s), literal(s), rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-15)]
        for s in misfloored:
            i, fraction = restart_by_walking(s, first, t_mul)
            assert fraction == 0.0, f"{name}: Keras's formula disagrees away from a restart, at step {s}"
        if misfloored:
            extra["note"] = (f"at steps {misfloored}, restarts, Keras's code run in float64 (and torch's "
                             f"CosineAnnealingWarmRestarts) floors the log one period early and gives "
                             f"{[literal(s) for s in misfloored]}; in float32, Keras's default, it gives the "
                             f"restart's value, as expected here")
        if torch_check:
            extra["cross_checked_with"] = (f"torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(T_0={first}, "
                                           f"T_mult={int(t_mul)}, eta_min={alpha}*{lr})"
                                           + (", except at the steps in note" if misfloored else ""))
        case = add(name, {"schedule": "cosine_decay_restarts",
                          "args": {"initial_learning_rate": lr, "first_decay_steps": first,
                                   "t_mul": t_mul, "m_mul": m_mul, "alpha": alpha}},
                   schedule, steps, **extra)
        if torch_check:
            assert m_mul == 1.0 and t_mul == int(t_mul), "torch has no m_mul and only integer T_mult"
            kept = [i for i, s in enumerate(steps) if s not in misfloored]
            theirs = torch_rates(lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
                o, T_0=first, T_mult=int(t_mul), eta_min=alpha * lr), lr, [steps[i] for i in kept])
            assert_close([case["expected"][i] for i in kept], theirs, name)

    add_restarts("cosine_decay_restarts defaults (torch CosineAnnealingWarmRestarts)", 0.1, 100, 2.0, 1.0, 0.0,
                 [0, 1, 50, 99, 100, 101, 200, 299, 300, 301, 700, 1000], torch_check=True)
    add_restarts("cosine_decay_restarts alpha (torch CosineAnnealingWarmRestarts)", 0.1, 100, 2.0, 1.0, 0.2,
                 [0, 1, 50, 99, 100, 101, 299, 300, 301, 1500], torch_check=True)
    add_restarts("cosine_decay_restarts t_mul 1 m_mul 0.5 alpha 0.1", 0.1, 100, 1.0, 0.5, 0.1,
                 [0, 50, 99, 100, 150, 199, 200, 250, 1000], torch_check=False)
    # Periods of 100, 150, 225, 337.5, 506.25: restarts at 100, 250, 475, 812.5, 1318.75.
    add_restarts("cosine_decay_restarts t_mul 1.5 m_mul 0.9 alpha 0.05", 0.1, 100, 1.5, 0.9, 0.05,
                 [0, 99, 100, 101, 249, 250, 474, 475, 812, 813, 1318, 1319, 5000], torch_check=False)
    # Periods of 10, 30, 90, 270, 810, 2430: restarts at 10, 40, 130, 400, 1210.
    add_restarts("cosine_decay_restarts t_mul 3 (restart where Keras's log misfloors)", 0.1, 10, 3.0, 1.0, 0.0,
                 [0, 9, 10, 39, 40, 130, 400, 1209, 1210, 1211, 3640], torch_check=True)

    # linear_warmup around other schedules
    add("linear_warmup exponential_decay",
        {"schedule": "linear_warmup", "args": {"warmup_steps": 100, "start": 0.0},
         "inner": {"schedule": "exponential_decay",
                   "args": {"initial_learning_rate": 0.1, "decay_steps": 1000, "decay_rate": 0.5,
                            "staircase": False}}},
        linear_warmup(keras_exponential_decay(0.1, 1000, 0.5), 100, 0.0),
        [0, 1, 50, 99, 100, 101, 1100, 5000])
    add("linear_warmup cosine_decay from a nonzero start",
        {"schedule": "linear_warmup", "args": {"warmup_steps": 10, "start": 0.001},
         "inner": {"schedule": "cosine_decay",
                   "args": {"initial_learning_rate": 0.01, "decay_steps": 90, "alpha": 0.1}}},
        linear_warmup(keras_cosine_decay(0.01, 90, 0.1), 10, 0.001),
        [0, 1, 5, 9, 10, 11, 55, 99, 100, 101, 1000])
    add("linear_warmup piecewise_constant",
        {"schedule": "linear_warmup", "args": {"warmup_steps": 20, "start": 0.0},
         "inner": {"schedule": "piecewise_constant", "args": {"boundaries": [50, 100], "values": [0.3, 0.2, 0.1]}}},
        linear_warmup(keras_piecewise_constant([50, 100], [0.3, 0.2, 0.1]), 20, 0.0),
        [0, 10, 19, 20, 70, 71, 120, 121, 1000])
    add("linear_warmup of zero steps is the schedule",
        {"schedule": "linear_warmup", "args": {"warmup_steps": 0, "start": 0.0},
         "inner": {"schedule": "inverse_sqrt", "args": {"learning_rate": 0.002, "warmup_steps": 10}}},
        linear_warmup(inverse_sqrt(0.002, 10), 0, 0.0), [0, 5, 10, 40, 1000])

    out = pathlib.Path(__file__).with_name("schedules.json")
    document = {
        "generated_by": "tests/reference/schedules_reference.py",
        "relative_tolerance": 1e-6,
        "cases": cases,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out}: {len(cases)} cases, {sum(len(c['steps']) for c in cases)} values")


if __name__ == "__main__":
    main()
