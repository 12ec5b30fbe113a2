"""The waiting room's table `make bench` prints (scripts/bench/scenarios-queue.sh; the
method and the recorded figures are in docs/waiting-room.md, "Numbers (make bench)").

Each scenario's NAME.json holds its figures and its checks (goals and invariants with
their verdicts); a row per check, under a headline per scenario. Called by report.py.
"""
import json
import os

SCENARIOS = [
    "queue_fairness",
    "queue_fairness_direct",
    "queue_fifo",
    "queue_poll_cost",
    "queue_inlet",
    "queue_inlet_cap",
    "queue_exactness",
]


def headline(name, f):
    """The scenario's figure in a few words."""
    if name.startswith("queue_fairness"):
        room = f.get("room_at_end")
        places = "" if room is None else f", {room['admitted']} places admitted"
        return (f"bots {f['bots']['units']} of {f['units_sold']} units (per operator"
                f" {', '.join(map(str, f['units_per_operator']))}), 99 % interval"
                f" [{f['interval'][0]:.1f}, {f['interval'][1]:.1f}]{places}; {f['polls_per_sec']:.0f} polls/s")
    if name == "queue_fifo":
        return (f"{f['joined']} joined, {f['admitted']} admitted, {f['admitted_answers']} admitted answers,"
                f" {f['admitted_before_an_earlier_joiner']} out of order")
    if name == "queue_poll_cost":
        cpu = f.get("cpu_ratio_median")
        cpu = "" if cpu is None else f", server CPU per poll ÷ per sold-out answer {cpu:.2f}"
        return (f"polls ÷ sold-out path {f['ratio_median']:.2f} ({f['ratio_range'][0]:.2f}–{f['ratio_range'][1]:.2f}){cpu},"
                f" Redis calls per poll {f['calls_per_poll_median']:.5f} (max {f['calls_per_poll_max']:.5f})")
    if name.startswith("queue_inlet"):
        per = f["per_second"]
        return (f"{f['admitted_per_sec']:.2f} admitted/s (admitPerSecond {f['admit_per_second']}; per second"
                f" p5 {per[1]:.0f}, p50 {per[2]:.0f}, p95 {per[3]:.0f}), live passes max {f['live_passes_max']}"
                f" (maxActive {f['max_active']})")
    if name == "queue_exactness":
        return (f"{f['admitted_places']} places admitted, {f['places_with_two_users']} twice;"
                f" orders {f['orders']}; survivor's next admission"
                f" {f['survivor_next_admission_after_s'] or float('nan'):.2f} s after the kill")
    return ""


def report(out):
    runs = []
    for name in SCENARIOS:
        path = os.path.join(out, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                runs.append((name, json.load(f)))
    if not runs:
        return
    print("\nthe waiting room (docs/waiting-room.md, \"Numbers (make bench)\")\n")
    print("| scenario | check | detail | |")
    print("|---|---|---|---|")
    for name, r in runs:
        print(f"| {name} | {r['scenario']} | {headline(name, r['figures'])} | |")
        for c in r["checks"]:
            print(f"| | {c['name']} | {c['detail']} | {'ok' if c['passed'] else 'FAILED'} |")
