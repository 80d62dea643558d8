"""Tabulates scripts/bench-against-baseline's runs: OUT/{baseline,current}/roundR/BENCH.json.

    python3 scripts/compare_bench_rounds.py OUT conv_forward,conv_backward ROUNDS

Per case and pyooc variant (the pyooc_*_s keys): the median of every timed run of all rounds on
each side (the `times` lists; the recorded median where a run kept no list), their ratio, and each
round's ratio; then the bandwidths each run measured (pinned link both ways, host copy with all
cores), which the pageable variants follow. Writes OUT/compare.md and prints it."""

import json
import pathlib
import statistics
import sys


def load(out, side, bench, rounds):
    runs = []
    for r in range(1, rounds + 1):
        path = out / side / f"round{r}" / f"{bench}.json"
        runs.append(json.loads(path.read_text()) if path.exists() else None)
    return runs


def timed(case, key):
    """The timed runs behind case[key] (pyooc_<variant>_s), or its median alone."""
    variant = key[len("pyooc_"):-len("_s")]
    runs = case.get("times", {}).get(variant)
    if runs:
        return list(runs)
    return [case[key]] if isinstance(case.get(key), (int, float)) else []


def cases_by_name(run):
    return {c["name"]: c for c in run["cases"]} if run else {}


def compare(out, bench, rounds):
    base, cur = load(out, "baseline", bench, rounds), load(out, "current", bench, rounds)
    rows = []
    names = [c["name"] for run in cur if run for c in run["cases"]]
    for name in dict.fromkeys(names):
        keys = sorted({k for run in cur if run for k in cases_by_name(run).get(name, {})
                       if k.startswith("pyooc_") and k.endswith("_s")})
        for key in keys:
            b_all, c_all, per_round = [], [], []
            for b_run, c_run in zip(base, cur):
                b, c = timed(cases_by_name(b_run).get(name, {}), key), timed(cases_by_name(c_run).get(name, {}), key)
                b_all += b
                c_all += c
                if b and c:
                    per_round.append(statistics.median(c) / statistics.median(b))
            if not (b_all and c_all):
                continue
            b_med, c_med = statistics.median(b_all), statistics.median(c_all)
            spread = " ".join(f"{x:.3f}" for x in per_round)
            rows.append(f"| {bench} | {name} | {key[6:-2]} | {b_med * 1e3:.1f} ms ({len(b_all)}) | "
                        f"{c_med * 1e3:.1f} ms ({len(c_all)}) | {c_med / b_med:.3f} | {spread} |")
    links = []
    for side, runs in (("baseline", base), ("current", cur)):
        for r, run in enumerate(runs, 1):
            bw = (run or {}).get("bandwidth") or {}
            if bw:
                host = bw.get("host_copy")
                links.append(f"| {bench} | {side} | {r} | {bw.get('h2d', 0):.1f} | {bw.get('d2h', 0):.1f} | "
                             f"{bw.get('bidir', 0):.1f} | {'-' if host is None else f'{host:.1f}'} |")
    return rows, links


def main(argv):
    out, benches, rounds = pathlib.Path(argv[1]), argv[2].split(","), int(argv[3])
    rows = ["| benchmark | case | variant | baseline (runs) | current (runs) | current / baseline | per round |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    links = ["| benchmark | side | round | H2D GB/s | D2H GB/s | both GB/s | host copy GB/s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for bench in benches:
        r, l = compare(out, bench, rounds)
        rows += r
        links += l
    text = "\n".join(rows) + "\n\nBandwidths each run measured:\n\n" + "\n".join(links) + "\n"
    (out / "compare.md").write_text(text)
    print(text)
    return 0 if len(rows) > 2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
