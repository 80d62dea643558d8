"""A benchmark's results: each case's ratios and targets (summarize), the JSON with every number
and the markdown table, written under --out (bench/results for a full run).

Every benchmark's case carries the same timing keys (roofline_s, pyooc_pinned_s, pyooc_pageable_s,
incore_torch_s, naive_torch_s, expert_torch_s), so one summary and one table serve them all; a
benchmark adds its own sections (report_markdown's `sections`) or, like fused.py, writes its own
table with markdown_table and target_rows. The array variants users pass (issue 14: all pinned, a
fresh result, a chain; pyooc_<variant>_s beside roofline_s) have their targets (VARIANT_TARGETS,
summarize_variants) and table (variant_lines) here, for every benchmark that measures them."""

import json
import os

from _units import fmt_bytes, fmt_s


# --------------------------------------------------------------------------------------------
# a case's ratios and targets


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def summarize(r, targets):
    """The ratios of a case's timings (> 1 is good) and each target (key, goal, label) met or not."""
    rl = r["roofline_s"]
    r["ratios"] = {
        "pinned_efficiency": ratio(rl, r["pyooc_pinned_s"]),
        "pageable_efficiency": ratio(rl, r["pyooc_pageable_s"]),
        "speedup_vs_naive": ratio(r["naive_torch_s"], r["pyooc_pageable_s"]),
        "speedup_vs_naive_pinned": ratio(r["naive_torch_s"], r["pyooc_pinned_s"]),
        "ratio_vs_expert": ratio(r["expert_torch_s"], r["pyooc_pinned_s"]),
        "ratio_vs_expert_pageable": ratio(r["expert_torch_s"], r["pyooc_pageable_s"]),
        "pinned_over_incore": ratio(r["pyooc_pinned_s"], r["incore_torch_s"]),
        "expert_efficiency": ratio(rl, r["expert_torch_s"]),
    }
    r["targets"] = {}
    add_targets(r, targets)


def add_targets(r, targets, lower_is_better=False):
    """Each target (key, goal, label) of r["ratios"][key] into r["targets"]: met, missed, or None
    (not measured)."""
    for key, goal, label in targets:
        value = r["ratios"][key]
        t = r["targets"][key] = {"goal": goal, "label": label, "value": value}
        if lower_is_better:
            t["lower_is_better"] = True
        t["met"] = None if value is None else value <= goal if lower_is_better else value >= goal


# The array variants' targets (issue 14), against the roofline of the case: each (key, goal, label).
VARIANT_TARGETS = [
    ("all_pinned_efficiency", 0.90, "all pinned >= 0.90 of roofline"),
    ("chained_efficiency", 0.90, "chained >= 0.90 of roofline"),
    ("fresh_efficiency", 0.60, "fresh result >= 0.60 of roofline"),
]


def summarize_variants(r, targets=VARIANT_TARGETS):
    """The array variants' ratios to the roofline (pyooc_all_pinned_s, pyooc_chained_s,
    pyooc_fresh_s; None where not measured) and their targets, beside summarize's."""
    rl = r["roofline_s"]
    r["ratios"].update({
        "all_pinned_efficiency": ratio(rl, r.get("pyooc_all_pinned_s")),
        "chained_efficiency": ratio(rl, r.get("pyooc_chained_s")),
        "fresh_efficiency": ratio(rl, r.get("pyooc_fresh_s")),
    })
    add_targets(r, targets)


# --------------------------------------------------------------------------------------------
# markdown


def report_markdown(report, name, case_detail, roofline_note="", sections=()):
    """A report as markdown: the timings, the targets, `sections` (more lines), a note per case
    (case_detail(case): its operands, as a string)."""
    bw = report["bandwidth"]
    lines = [f"# {name} benchmark", "",
             f"commit `{report['commit']}`, {report['date']}, {report['device']}" +
             ("" if report["mode"] == "full" else f", {report['mode']} mode (not the issue's sizes)"), "",
             f"Link ({'assumed, not measured' if bw.get('assumed') else 'measured in this run'}): pinned H2D "
             f"{bw['h2d']:.1f} GB/s, D2H {bw['d2h']:.1f} GB/s, both directions {bw['bidir']:.1f} GB/s; pageable "
             f"H2D {bw['pageable_h2d']:.1f} GB/s, D2H {bw['pageable_d2h']:.1f} GB/s.", "",
             f"Median seconds (roofline = max(in/H2D, out/D2H, (in+out)/both, in-core compute){roofline_note}):", ""]
    rows = []
    for c in report["cases"]:
        bound = c.get("roofline", {}).get("bound", "?")
        rows.append([c["name"], fmt_bytes(c["working_set_bytes"]), fmt_bytes(c["memory_limit"]),
                     f"{fmt_s(c['roofline_s'])} ({bound})", fmt_s(c["pyooc_pinned_s"]),
                     fmt_s(c["pyooc_pageable_s"]), fmt_s(c["incore_torch_s"]), fmt_s(c["naive_torch_s"]),
                     fmt_s(c["expert_torch_s"])])
    lines.append(markdown_table(["case", "working set", "memory_limit", "roofline", "pyooc pinned",
                                 "pyooc pageable", "in-core torch", "naive torch", "expert torch"], rows))
    lines += ["", "Targets:", ""]
    rows = [row for c in report["cases"] for row in target_rows(c)]
    lines.append(markdown_table(["case", "target", "value", "verdict"], rows))
    lines += list(sections)
    notes = []
    for c in report["cases"]:
        plan = c.get("pyooc_plan", {})
        notes.append(f"- {c['name']}: {c['description']}; {case_detail(c)}; pyooc "
                     f"splits {plan.get('splits')}, {plan.get('num_chunks')} chunks; naive "
                     f"{_peer_note(c.get('naive'))}; expert {_peer_note(c.get('expert'))}; "
                     f"max rel. error {_max_err(c)}")
        for peer, why in c["failures"].items():
            notes.append(f"  - FAILED {peer}: {why}")
        for peer, why in c["skipped"].items():
            notes.append(f"  - skipped {peer}: {why}")
    for case, why in report.get("skipped_cases", {}).items():
        notes.append(f"- {case}: not run ({why})")
    lines += ["", *notes, ""]
    return "\n".join(lines)


def _peer_note(info):
    if not info:
        return "-"
    if info.get("mode") == "n":
        shape = f"{info.get('samples_per_chunk')} samples/chunk"
    elif info.get("mode") == "rows":
        shape = f"{info.get('rows_per_chunk')} {info.get('unit', 'rows')}/chunk"
    else:
        shape = f"{info.get('rows_per_chunk')} rows/slab"
    over = "" if info.get("within_limit", True) else " OVER LIMIT"
    return f"{info.get('chunks')} chunks of {shape}, peak {fmt_bytes(info.get('peak_device_bytes'))}{over}"


def _max_err(c):
    errs = [e for e in c["errors"].values() if e is not None]
    return f"{max(errs):.2e}" if errs else "-"


def target_row(value, goal, higher_is_better=True):
    """A target's value and verdict, as two table cells."""
    if value is None:
        return "-", "not measured"
    met = value >= goal if higher_is_better else value <= goal
    return f"{value:.2f}", "met" if met else "missed"


def target_rows(case, keys=None):
    """The targets table's rows of a case (those named in keys, else all): case, label, value,
    verdict."""
    rows = []
    for key, t in case["targets"].items():
        if keys is None or key in keys:
            value, verdict = target_row(t["value"], t["goal"], not t.get("lower_is_better"))
            rows.append([case["name"], t["label"], value, verdict])
    return rows


def variant_lines(report, columns):
    """A table of the array variants' median seconds, each with its fraction of its bound: columns
    (label, time key, bound key), e.g. ("all pinned", "pyooc_all_pinned_s", "roofline_s"); "-"
    where a variant was not measured."""
    host = report["bandwidth"].get("host_copy")
    own = any(bound == "pageable_bound_s" for _, _, bound in columns)
    lines = ["", "Array variants (seconds, fraction of the roofline; a pageable variant's own bound also counts the "
             f"host copy of every byte with all cores, {host:.1f} GB/s measured in this run):" if host and own else
             "Array variants (seconds, fraction of the roofline):", "",
             "| case | " + " | ".join(label for label, _, _ in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for c in report["cases"]:
        cells = []
        for _, key, bound in columns:
            t, rl = c.get(key), c.get(bound)
            cells.append("-" if t is None else f"{t:.3f} ({rl / t:.2f})" if rl else f"{t:.3f}")
        lines.append(f"| {c['name']} | " + " | ".join(cells) + " |")
    stand_ins = {c["pinned_arrays"] for c in report["cases"] if c.get("pinned_arrays")}
    for note in sorted(stand_ins):
        lines += ["", f"Pinned variants: {note}."]
    return lines


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# files


def write_json(path, data):
    """Through a temporary file and a rename, so a run killed mid-write keeps the previous JSON."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)


def _json_default(obj):
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def write_text(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
